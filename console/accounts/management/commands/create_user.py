from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from console.accounts.roles import ROLES
from console.accounts.scopes import DEFAULT_SCOPES, SCOPES
from console.accounts.services import api_token_create, api_token_scopes_clean, user_create


class Command(BaseCommand):
    help = "Create (or update) a user with one role: engineer, approver or viewer."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=ROLES)
        parser.add_argument("--password", help="defaults to reading SPECREVIEW_NEW_PASSWORD or prompting")
        parser.add_argument("--email", default="")
        parser.add_argument("--token", action="store_true", help="also create an API token and print it once")
        parser.add_argument(
            "--scopes",
            default=",".join(DEFAULT_SCOPES),
            help=f"with --token: what the token may do, comma-separated from {','.join(SCOPES)} "
            f"(default {','.join(DEFAULT_SCOPES)}; sign only when asked)",
        )

    def handle(self, *args, username, role, password, email, token, scopes, **options):
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
        user = user_create(username=username, password=password, role=role, email=email)
        self.stdout.write(f"user {user.username} has role {role}")
        if token:
            key = api_token_create(user=user, scopes=scopes)
            self.stdout.write(f"API token with scopes {', '.join(scopes)} (shown once): {key}")
