"""Teams and memberships from a shell (it lives with the traces: a team's redaction patterns are
the import's, checked by its parser). For scripts and provisioning; the admin site does the
same by hand.

    manage.py team create NAME [--redact] [--retention-days N]
    manage.py team add NAME USER --role engineer [--raw-text yes|no|role]
    manage.py team remove NAME USER
    manage.py team list [NAME]
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from console.accounts.models import Membership, Team
from console.accounts.roles import ROLES
from console.accounts.services import membership_remove, membership_set, team_resolve
from console.traces.redaction import RedactionError, patterns_parse

RAW_TEXT = {"yes": True, "no": False, "role": None}


class Command(BaseCommand):
    help = "Create teams and give users a role in them: create, add, remove, list."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a team (or change its settings)")
        create.add_argument("name")
        create.add_argument("--redact", action="store_true", help="every upload is redacted before storing")
        create.add_argument("--patterns-file", help="the team's own NAME=REGEX redaction patterns, one a line")
        create.add_argument("--retention-days", type=int, help="days raw text is kept (default: the installation's)")
        add = sub.add_parser("add", help="give a user a role in a team (replacing their role there)")
        add.add_argument("name")
        add.add_argument("username")
        add.add_argument("--role", required=True, choices=ROLES)
        add.add_argument(
            "--raw-text", choices=list(RAW_TEXT), default="role", help="read prompts and outputs (default: as the role)"
        )
        remove = sub.add_parser("remove", help="take a user out of a team")
        remove.add_argument("name")
        remove.add_argument("username")
        listing = sub.add_parser("list", help="teams, or one team's members")
        listing.add_argument("name", nargs="?")

    def handle(self, *args, action, **options):
        getattr(self, f"_{action}")(**options)

    def _create(self, *, name, redact, patterns_file, retention_days, **_):
        if retention_days is not None and retention_days < 1:
            raise CommandError("--retention-days: at least 1 (leave it out to keep raw text as the installation does)")
        patterns = ""
        if patterns_file:
            try:
                with open(patterns_file, encoding="utf-8") as fh:
                    patterns = fh.read()
                patterns_parse(patterns)
            except (OSError, UnicodeDecodeError, RedactionError) as exc:
                raise CommandError(f"--patterns-file {patterns_file}: {exc}") from None
        try:
            team = team_resolve(name, create=True)
        except ValidationError as exc:
            raise CommandError(f"team name {name!r}: {' '.join(exc.messages)}") from None
        team.redact_at_import = redact or team.redact_at_import
        team.redaction_patterns = patterns or team.redaction_patterns
        if retention_days is not None:
            team.raw_text_retention_days = retention_days
        team.save()
        self.stdout.write(f"team {team.name}: {_settings(team)}")

    def _add(self, *, name, username, role, raw_text, **_):
        team, user = _team(name), _user(username)
        membership_set(user=user, team=team, role=role, raw_text=RAW_TEXT[raw_text])
        self.stdout.write(f"{user.username} is {role} in {team.name}")

    def _remove(self, *, name, username, **_):
        team, user = _team(name), _user(username)
        if not membership_remove(user=user, team=team):
            raise CommandError(f"{username} is not a member of {name}")
        self.stdout.write(f"{user.username} left {team.name}")

    def _list(self, *, name, **_):
        if name is None:
            for team in Team.objects.all():
                self.stdout.write(f"{team.name}: {team.memberships.count()} members; {_settings(team)}")
            return
        team = _team(name)
        for m in Membership.objects.filter(team=team).select_related("user"):
            raw = "" if m.raw_text is None else (" (raw text on)" if m.raw_text else " (raw text off)")
            self.stdout.write(f"{m.user.username}: {m.role}{raw}")


def _settings(team: Team) -> str:
    days = team.raw_text_retention_days
    return (
        f"redaction {'on' if team.redact_at_import else 'off'}"
        f"{' with its own patterns' if team.redaction_patterns.strip() else ''}, "
        f"raw text kept {f'{days} days' if days else 'as the installation says'}"
    )


def _team(name: str) -> Team:
    team = Team.objects.filter(name=name).first()
    if team is None:
        raise CommandError(f"no team {name!r}: manage.py team create {name}")
    return team


def _user(username: str):
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"no user {username!r}: manage.py create_user {username} --role ... --team ...")
    return user
