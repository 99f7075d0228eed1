"""Teams own traces and everything made from them; a user's role is per team (a Membership).

Existing installations: every user with a role group becomes a member of the team "default" with
that role, the role groups go (permissions come from memberships now: accounts/backends.py), and
every API token acts in its user's team."""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

ROLES = ("engineer", "approver", "viewer")


def to_teams(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Team = apps.get_model("accounts", "Team")
    Membership = apps.get_model("accounts", "Membership")
    ApiToken = apps.get_model("accounts", "ApiToken")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    groups = {g.name: g for g in Group.objects.filter(name__in=ROLES)}
    users = list(User.objects.filter(groups__in=groups.values()).distinct()) if groups else []
    if users or ApiToken.objects.exists():
        team, _ = Team.objects.get_or_create(name=getattr(settings, "SPECREVIEW_DEFAULT_TEAM", "default"))
        for user in users:
            names = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
            role = next(r for r in ("approver", "engineer", "viewer") if r in names)
            Membership.objects.get_or_create(team=team, user=user, defaults={"role": role})
        member_ids = set(Membership.objects.filter(team=team).values_list("user_id", flat=True))
        ApiToken.objects.filter(user_id__in=member_ids, team__isnull=True).update(team=team)
    for group in groups.values():
        group.delete()


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0006_api_token_scopes"),
        ("auth", "0012_alter_user_first_name_max_length"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Team",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "name",
                    models.CharField(
                        max_length=64,
                        unique=True,
                        validators=[
                            django.core.validators.RegexValidator(
                                "^[a-z0-9][a-z0-9_-]{0,63}$", "lower-case letters, digits, '-' and '_', at most 64"
                            )
                        ],
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "redact_at_import",
                    models.BooleanField(
                        default=False,
                        help_text="every upload of the team redacts emails, keys, card numbers... before anything is stored",
                    ),
                ),
                (
                    "redaction_patterns",
                    models.TextField(
                        blank=True,
                        default="",
                        help_text="the team's own patterns, one NAME=REGEX a line, added to every redacted upload",
                    ),
                ),
                (
                    "raw_text_retention_days",
                    models.PositiveIntegerField(
                        blank=True,
                        null=True,
                        validators=[django.core.validators.MinValueValidator(1)],
                        help_text="days after import that raw text is kept; empty: the installation's SPECREVIEW_RAW_TEXT_RETENTION_DAYS (unset: for ever)",
                    ),
                ),
            ],
            options={"ordering": ["name"]},
        ),
        migrations.CreateModel(
            name="Membership",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "role",
                    models.CharField(
                        choices=[("engineer", "engineer"), ("approver", "approver"), ("viewer", "viewer")],
                        max_length=16,
                    ),
                ),
                (
                    "raw_text",
                    models.BooleanField(
                        blank=True,
                        null=True,
                        help_text="read prompts and outputs: empty follows the role (engineers and approvers yes, viewers no)",
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to="accounts.team"
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["team__name", "user__username"]},
        ),
        migrations.AddConstraint(
            model_name="membership",
            constraint=models.UniqueConstraint(fields=("team", "user"), name="membership_one_per_team"),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="team",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="api_tokens",
                to="accounts.team",
            ),
        ),
        migrations.RunPython(to_teams, migrations.RunPython.noop),
    ]
