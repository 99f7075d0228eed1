"""The signer's username as it was at signing, on the sign-off row (pages showed the user's current
name, so renaming a user rewrote who had signed).

Existing sign-offs take the name their archived bundle recorded at signing (``names.signer``), or
the user's current name where no bundle has one. Sign-offs are append-only: the fill runs with
their UPDATE guard lifted, as the table owner that ``migrate`` connects as, and puts it back.
"""

import json

from django.db import migrations, models

SQLITE_GUARD = (
    "CREATE TRIGGER decisions_signoff_frozen_{op} BEFORE {OP} ON decisions_signoff "
    "BEGIN SELECT RAISE(ABORT, 'decisions_signoff rows are append-only: {OP} refused'); END"
)


def _names_at_signing(apps) -> dict[int, str]:
    """Sign-off id -> the signer's name its bundle recorded (else the user's current one)."""
    SignOff = apps.get_model("decisions", "SignOff")
    ArchiveRecord = apps.get_model("decisions", "ArchiveRecord")
    bundles = dict(ArchiveRecord.objects.values_list("decision_id", "bundle"))
    names = {}
    for row in SignOff.objects.filter(signer_username="").select_related("signer"):
        try:
            recorded = (json.loads(bundles.get(row.decision_id) or "{}").get("names") or {}).get("signer")
        except ValueError:
            recorded = None
        names[row.pk] = recorded if isinstance(recorded, str) and recorded else row.signer.username
    return names


def _fill(apps, schema_editor):
    names = _names_at_signing(apps)
    vendor = schema_editor.connection.vendor
    with schema_editor.connection.cursor() as cursor:
        if vendor == "postgresql" and names:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # ALTER TABLE refuses with checks pending
            cursor.execute("ALTER TABLE decisions_signoff DISABLE TRIGGER decisions_signoff_frozen")
        if vendor == "sqlite":
            # SQLite adds the column by rebuilding the table, which drops its triggers: 0002's guard is
            # put back below, after the fill, whether or not there was anything to fill.
            for op in ("update", "delete"):
                cursor.execute(f"DROP TRIGGER IF EXISTS decisions_signoff_frozen_{op}")
        for pk, name in names.items():
            cursor.execute("UPDATE decisions_signoff SET signer_username = %s WHERE id = %s", [name, pk])
        if vendor == "postgresql" and names:
            cursor.execute("ALTER TABLE decisions_signoff ENABLE TRIGGER decisions_signoff_frozen")
        if vendor == "sqlite":
            for op in ("update", "delete"):
                cursor.execute(SQLITE_GUARD.format(op=op, OP=op.upper()))


class Migration(migrations.Migration):
    dependencies = [("decisions", "0002_immutability_triggers")]

    operations = [
        migrations.AddField(
            model_name="signoff",
            name="signer_username",
            field=models.CharField(blank=True, help_text="the signer's username at signing", max_length=150),
        ),
        migrations.RunPython(_fill, migrations.RunPython.noop),
    ]
