"""Search the whole test database for a planted string (redaction, retention, raw-text tests)."""

from __future__ import annotations

from django.db import connection


def stored_anywhere(marker: str) -> list[str]:
    """Every text, varchar and JSON column of every table in this database that holds ``marker``
    (``table.column``, sorted). Postgres only (information_schema)."""
    hits = []
    with connection.cursor() as cur:
        cur.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' "
            "AND data_type IN ('text', 'character varying', 'json', 'jsonb')"
        )
        for table, column in cur.fetchall():
            cur.execute(f'SELECT count(*) FROM "{table}" WHERE "{column}"::text LIKE %s', [f"%{marker}%"])
            if cur.fetchone()[0]:
                hits.append(f"{table}.{column}")
    return sorted(hits)
