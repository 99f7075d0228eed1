from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from console.accounts.roles import ROLES
from console.accounts.scopes import DEFAULT_SCOPES, SCOPES
from console.accounts.services import api_token_create, api_token_scopes_clean, team_resolve, user_create


class Command(BaseCommand):
    help = "Create (or update) a user with a role (engineer, approver or viewer) in a team."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=ROLES)
        parser.add_argument(
            "--team", default=None, help="the team the role is in, made if missing (default: the default team)"
        )
        parser.add_argument("--password", help="defaults to reading SPECREVIEW_NEW_PASSWORD or prompting")
        parser.add_argument("--email", default="")
        parser.add_argument("--token", action="store_true", help="also create an API token and print it once")
        parser.add_argument(
            "--scopes",
            default=",".join(DEFAULT_SCOPES),
            help=f"with --token: what the token may do, comma-separated from {','.join(SCOPES)} "
            f"(default {','.join(DEFAULT_SCOPES)}; sign only when asked)",
        )

    def handle(self, *args, username, role, team, password, email, token, scopes, **options):
        import getpass
        import os

        try:  # before the user is made: a bad --scopes changes nothing
            scopes = api_token_scopes_clean(scopes)
        except ValidationError as exc:
            raise CommandError(f"--scopes: {' '.join(exc.message_dict['scopes'])}") from None
        password = password or os.environ.get("SPECREVIEW_NEW_PASSWORD")
        if not password:
            password = getpass.getpass(f"Password for {username}: ")
        if len(password) < 8:
            raise CommandError("password must be at least 8 characters")
        try:
            owner = team_resolve(team, create=True)
        except ValidationError as exc:
            raise CommandError(f"--team {team!r}: {' '.join(exc.messages)}") from None
        user = user_create(username=username, password=password, role=role, email=email, team=owner)
        self.stdout.write(f"user {user.username} has role {role} in team {owner.name}")
        if token:
            key = api_token_create(user=user, scopes=scopes, team=owner)
            self.stdout.write(
                f"API token for team {owner.name} with scopes {', '.join(scopes)} (shown once): {key}"
            )
