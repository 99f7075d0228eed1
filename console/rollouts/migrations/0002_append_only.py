"""Database-level guard: a rollout's looks and events refuse UPDATE and DELETE (PostgreSQL, with
the decisions' own trigger function, decisions 0002; SQLite with triggers of its own)."""

from django.db import migrations

APPEND_ONLY = ("rollouts_look", "rollouts_rolloutevent")


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for table in APPEND_ONLY:
        if vendor == "postgresql":
            schema_editor.execute(
                f"CREATE TRIGGER {table}_frozen BEFORE UPDATE OR DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION decisions_refuse_frozen()"
            )
        elif vendor == "sqlite":
            for op in ("UPDATE", "DELETE"):
                schema_editor.execute(
                    f"CREATE TRIGGER {table}_frozen_{op.lower()} BEFORE {op} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} rows are append-only: {op} refused'); END"
                )


def uninstall(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for table in APPEND_ONLY:
        if vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_frozen ON {table}")
        elif vendor == "sqlite":
            for op in ("update", "delete"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_frozen_{op}")


class Migration(migrations.Migration):
    dependencies = [("rollouts", "0001_initial"), ("decisions", "0002_immutability_triggers")]

    operations = [migrations.RunPython(install, uninstall)]
