"""N of M approvals: a decision collects one sign-off per approver, and may require its own number.

- ``SignOff.decision`` goes from one-to-one to a foreign key (``Decision.signoffs``), with one row per
  (decision, signer): existing sign-offs stay as they are, one per signed decision.
- ``Decision.approvals_required``: null follows the deployment's ``SPECREVIEW_APPROVALS_REQUIRED``
  on a draft; submission fixes it. Rows submitted or signed before it existed keep null and count
  as needing one approval (``Decision.approvals_needed``), which is what they were signed under.
- ``AuditEvent.action`` gains ``approval`` (a signature that leaves the decision waiting for more).

The database guard of migrations 0002 and 0004 stays: on PostgreSQL the column change is an
ALTER TABLE that keeps the table's triggers (row UPDATE/DELETE, statement TRUNCATE); SQLite makes the
change by rebuilding ``decisions_signoff``, which drops its triggers, so 0002's are put back here.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

SQLITE_GUARD = (
    "CREATE TRIGGER IF NOT EXISTS decisions_signoff_frozen_{op} BEFORE {OP} ON decisions_signoff "
    "BEGIN SELECT RAISE(ABORT, 'decisions_signoff rows are append-only: {OP} refused'); END"
)


def sqlite_guard_restore(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for op in ("update", "delete"):
        schema_editor.execute(SQLITE_GUARD.format(op=op, OP=op.upper()))


class Migration(migrations.Migration):
    dependencies = [
        ("decisions", "0004_truncate_guard"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="signoff",
            options={"ordering": ["signed_at", "id"]},
        ),
        migrations.AddField(
            model_name="decision",
            name="approvals_required",
            field=models.PositiveSmallIntegerField(
                blank=True,
                help_text="distinct approvers it needs; empty: the deployment's SPECREVIEW_APPROVALS_REQUIRED "
                "(submission fixes the number)",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="action",
            field=models.CharField(
                choices=[
                    ("created", "Created"),
                    ("edited", "Edited"),
                    ("submitted", "Submitted"),
                    ("approval", "Approval"),
                    ("signed", "Signed"),
                    ("superseded", "Superseded"),
                    ("exported", "Exported"),
                ],
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="signoff",
            name="decision",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="signoffs", to="decisions.decision"
            ),
        ),
        migrations.AddConstraint(
            model_name="signoff",
            constraint=models.UniqueConstraint(
                fields=("decision", "signer"), name="decisions_signoff_one_per_signer"
            ),
        ),
        migrations.RunPython(sqlite_guard_restore, migrations.RunPython.noop),
    ]
