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
            if column.endswith(("sha256", "_hash")):
                # hex digests the code computes: a short digit marker ("4111") turns up in one by
                # chance (a token's key hash did, once in a CI run), and no text is ever stored there
                continue
            cur.execute(f'SELECT count(*) FROM "{table}" WHERE "{column}"::text LIKE %s', [f"%{marker}%"])
            if cur.fetchone()[0]:
                hits.append(f"{table}.{column}")
    return sorted(hits)
