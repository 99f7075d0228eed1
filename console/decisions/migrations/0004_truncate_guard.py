"""Database-level guard, continued: TRUNCATE of the decision tables is refused too.

Migration 0002's triggers are per row (UPDATE, DELETE); TRUNCATE removes rows without firing them,
so ``TRUNCATE decisions_auditevent`` used to erase the audit trail that separation of duties reads.
A statement-level BEFORE TRUNCATE trigger now refuses it on the decision table and on every
append-only table (sign-offs, archive records, audit events); a TRUNCATE ... CASCADE that reaches
one is refused as a whole.

One exception, for test databases: a superuser (who could drop the trigger anyway) may truncate
after ``SET specreview.allow_truncate = 'on'``: Django's test runner empties tables with TRUNCATE
between transactional tests, and tests/conftest.py sets it on the test database only. The
application's role (docs/deploy.md) is no superuser and holds no TRUNCATE grant in the first place.

PostgreSQL only: SQLite has no TRUNCATE (its DELETE without WHERE fires 0002's row triggers).
"""

from django.db import migrations

TABLES = ("decisions_decision", "decisions_signoff", "decisions_archiverecord", "decisions_auditevent")

PG_FUNCTION = """
CREATE OR REPLACE FUNCTION decisions_refuse_truncate() RETURNS trigger AS $$
BEGIN
    IF current_setting('specreview.allow_truncate', true) = 'on'
       AND (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION '% rows are append-only: TRUNCATE refused', TG_TABLE_NAME;
END;
$$ LANGUAGE plpgsql;
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(PG_FUNCTION, params=None)  # '%' is RAISE's placeholder, not a parameter
    for table in TABLES:
        schema_editor.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION decisions_refuse_truncate()"
        )


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS decisions_refuse_truncate()")


class Migration(migrations.Migration):
    dependencies = [("decisions", "0003_signoff_signer_username")]

    operations = [migrations.RunPython(install, uninstall)]
