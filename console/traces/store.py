"""Storing an import's requests: rows stream into the table inside the import's transaction (Postgres
COPY, or bulk_create in batches elsewhere), then the arrival shift and the sort by arrival are applied
in place, by SQL, so no request is held in memory."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import ExitStack

from django.db import connection
from django.db.models import F

from console.traces.columns import JSON_POSITIONS, ROW_FIELDS
from console.traces.models import Trace, TraceRequest

BATCH_SIZE = 2000

# _CopyWriter.write puts the JSON texts at these positions of a row
assert JSON_POSITIONS == (4, 11, 12, 13)


class _CopyWriter:
    """Postgres COPY: rows stream to the server as they are parsed (psycopg formats each row)."""

    def __init__(self, trace: Trace, stack: ExitStack):
        meta = TraceRequest._meta
        columns = ["trace_id"] + [str(meta.get_field(f).column) for f in ROW_FIELDS]  # type: ignore[union-attr]
        cursor = stack.enter_context(connection.cursor())
        sql = f"COPY {connection.ops.quote_name(meta.db_table)} ({', '.join(columns)}) FROM STDIN"
        self.copy = stack.enter_context(cursor.copy(sql))
        self.trace_id = trace.pk

    def write(self, rows: Iterable[tuple[tuple, tuple]]) -> None:
        trace_id = self.trace_id
        write_row = self.copy.write_row
        # the JSON columns go as the canonical text the builder made for the content hash
        for row, (messages, response_format, tools, metadata) in rows:
            write_row((trace_id, *row[:4], messages, *row[5:11], response_format, tools, metadata, *row[14:]))


class _BulkWriter:
    """Other databases (SQLite): bulk_create in batches."""

    def __init__(self, trace: Trace):
        self.trace = trace

    def write(self, rows: Iterable[tuple[tuple, tuple]]) -> None:
        batch: list[TraceRequest] = []
        for row, _ in rows:
            batch.append(TraceRequest(trace=self.trace, **dict(zip(ROW_FIELDS, row, strict=True))))
            if len(batch) >= BATCH_SIZE:
                TraceRequest.objects.bulk_create(batch)
                batch = []
        if batch:
            TraceRequest.objects.bulk_create(batch)


def trace_requests_write(trace: Trace, rows: Iterable[tuple[tuple, tuple]], *, copy: bool) -> None:
    """Store the builder's rows (``ROW_FIELDS`` order, with their JSON texts) as ``trace``'s requests:
    by COPY if ``copy`` (Postgres), else by bulk_create."""
    with ExitStack() as stack:
        writer = _CopyWriter(trace, stack) if copy else _BulkWriter(trace)
        writer.write(rows)


def trace_requests_shift(trace: Trace, *, shift_s: float) -> None:
    """Add ``shift_s`` (seconds) to every arrival of ``trace`` (a clock trace with early stragglers)."""
    TraceRequest.objects.filter(trace=trace).update(arrival_s=F("arrival_s") + shift_s)


def trace_requests_sort_by_arrival(trace: Trace, *, count: int) -> None:
    """Renumber positions by (arrival, file order); record each request's file order in its metadata."""
    table = connection.ops.quote_name(TraceRequest._meta.db_table)
    with connection.cursor() as cursor:
        # move every position out of the way first: the (trace, position) unique check is per row
        cursor.execute(f"UPDATE {table} SET position = position + %s WHERE trace_id = %s", [count, trace.pk])
        if connection.vendor == "postgresql":
            meta = "metadata = r.metadata || jsonb_build_object('source_index', r.source_index)"
            target = f"{table} AS r"
            join = "r.id = s.id"
        else:
            meta = "metadata = json_set(metadata, '$.source_index', source_index)"
            target = table
            join = f"{table}.id = s.id"
        cursor.execute(
            f"UPDATE {target} SET position = s.rn - 1, {meta} FROM (SELECT id, ROW_NUMBER() OVER "
            f"(ORDER BY arrival_s, source_index) AS rn FROM {table} WHERE trace_id = %s) AS s WHERE {join}",
            [trace.pk],
        )
