"""Every trace belongs to a team (console/accounts/teams.py): traces stored before teams go to the
installation's default team."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def to_default_team(apps, schema_editor):
    Trace = apps.get_model("traces", "Trace")
    Team = apps.get_model("accounts", "Team")
    if Trace.objects.filter(team__isnull=True).exists():
        team, _ = Team.objects.get_or_create(name=getattr(settings, "SPECREVIEW_DEFAULT_TEAM", "default"))
        Trace.objects.filter(team__isnull=True).update(team=team)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0007_teams"),
        ("traces", "0003_request_sessions"),
    ]

    operations = [
        migrations.AddField(
            model_name="trace",
            name="team",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.PROTECT, related_name="traces", to="accounts.team"
            ),
        ),
        migrations.RunPython(to_default_team, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="trace",
            name="team",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="traces", to="accounts.team"
            ),
        ),
    ]
