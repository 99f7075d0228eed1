"""Revoke API tokens by id, by the first characters of the key, or every token of a user."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.accounts.selectors import api_tokens_matching
from console.accounts.services import api_token_revoke


class Command(BaseCommand):
    help = "Revoke API tokens: --id N, --prefix START (first characters of the key) or --user NAME --all."

    def add_arguments(self, parser):
        parser.add_argument("--id", type=int, dest="token_id")
        parser.add_argument("--prefix", help="the first characters of the token (at least 4)")
        parser.add_argument("--user", dest="username")
        parser.add_argument(
            "--all", action="store_true", dest="revoke_all", help="with --user: every token of that user"
        )
        parser.add_argument(
            "--list", action="store_true", dest="list_only", help="list the matching tokens, revoke nothing"
        )

    def handle(self, *args, token_id, prefix, username, revoke_all, list_only, **options):
        if token_id is None and not prefix and not username:
            raise CommandError("name the token: --id N, --prefix START or --user NAME --all")
        if prefix is not None and len(prefix) < 4:
            raise CommandError("--prefix needs at least 4 characters of the token")
        tokens = list(api_tokens_matching(token_id=token_id, prefix=prefix, username=username))
        if not tokens:
            raise CommandError("no token matches")
        for t in tokens:
            self.stdout.write(f"#{t.pk} {t.user.username} / {t.name} {t.prefix or '-'} {t.status}")
        if list_only:
            return
        if len(tokens) > 1 and not revoke_all:
            raise CommandError(f"{len(tokens)} tokens match: narrow it down, or add --all to revoke them all")
        revoked = sum(api_token_revoke(token=t, by=None) for t in tokens)
        self.stdout.write(
            self.style.SUCCESS(f"revoked {revoked} token(s); {len(tokens) - revoked} already revoked")
        )
