"""Database-level guard: signed decisions, sign-offs, archive records and audit events refuse
UPDATE and DELETE, whatever path the write takes (ORM, queryset update, raw SQL, admin).

PostgreSQL and SQLite get triggers; other backends rely on the model and service checks.
TRUNCATE (test database teardown) is not a row operation and is not refused.
"""

from django.db import migrations

SIGNED = "('approved', 'rejected', 'approved_with_conditions')"
APPEND_ONLY = ("decisions_signoff", "decisions_archiverecord", "decisions_auditevent")

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION decisions_refuse_frozen() RETURNS trigger AS $$
BEGIN
    IF TG_TABLE_NAME = 'decisions_decision' THEN
        IF OLD.status IN {SIGNED} THEN
            RAISE EXCEPTION 'decision % is signed and archived: % refused', OLD.id, TG_OP;
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% rows are append-only: % refused', TG_TABLE_NAME, TG_OP;
END;
$$ LANGUAGE plpgsql;
"""


def _tables():
    return ("decisions_decision", *APPEND_ONLY)


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        # params=None: the function body contains '%' placeholders of RAISE, not query parameters.
        schema_editor.execute(PG_FUNCTION, params=None)
        for table in _tables():
            schema_editor.execute(
                f"CREATE TRIGGER {table}_frozen BEFORE UPDATE OR DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION decisions_refuse_frozen()"
            )
    elif vendor == "sqlite":
        for op in ("UPDATE", "DELETE"):
            schema_editor.execute(
                f"CREATE TRIGGER decisions_decision_frozen_{op.lower()} BEFORE {op} ON decisions_decision "
                f"WHEN OLD.status IN {SIGNED} "
                f"BEGIN SELECT RAISE(ABORT, 'decision is signed and archived: {op} refused'); END"
            )
            for table in APPEND_ONLY:
                schema_editor.execute(
                    f"CREATE TRIGGER {table}_frozen_{op.lower()} BEFORE {op} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} rows are append-only: {op} refused'); END"
                )


def uninstall(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for table in _tables():
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_frozen ON {table}")
        schema_editor.execute("DROP FUNCTION IF EXISTS decisions_refuse_frozen()")
    elif vendor == "sqlite":
        for op in ("update", "delete"):
            for table in _tables():
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_frozen_{op}")


class Migration(migrations.Migration):
    dependencies = [("decisions", "0001_initial")]

    operations = [migrations.RunPython(install, uninstall)]
