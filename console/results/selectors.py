"""Reads of what runs produced: a run's stored results as the DataFrames the pure analysis code
takes (the results contract: one row per request per run, one row per run), from each run's pack
when it is current, from its rows otherwise."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
from django.db.models import BinaryField, Count, ExpressionWrapper, F, Max, QuerySet
from django.db.models.sql.constants import MULTI

from console.experiments.models import Run
from console.results.arrays import unpack_many
from console.results.frame_pack import FramePackError, frame_unpack, frames_concat
from console.results.models import RequestResult, RunResultsPack, RunTelemetry

log = logging.getLogger(__name__)

# RequestResult fields (or trace_request__ lookups) -> results contract column.
RESULT_FIELDS = {
    "id": "result_id",
    "run_id": "run_id",
    "request_id": "request_id",
    "trace_request__task": "task",
    "trace_request__traffic_class": "traffic_class",
    "trace_request__prompt_tokens": "prompt_tokens",
    "trace_request__max_tokens": "max_tokens",
    "scheduled_s": "scheduled_s",
    "sent_s": "sent_s",
    "first_token_s": "first_token_s",
    "finish_s": "finish_s",
    "queue_s": "queue_s",
    "chunk_times": "chunk_times",
    "chunk_tokens": "chunk_tokens",
    "num_output_tokens": "num_output_tokens",
    "output_token_ids": "output_token_ids",
    "output_text": "output_text",
    "finish_reason": "finish_reason",
    "error": "error",
    "drafted": "drafted",
    "accepted": "accepted",
    "spec_totals": "spec_totals",
    "trace_request__response_format": "response_format",
    "trace_request__tools": "tools",
    "trace_request__session_id": "session_id",
    "trace_request__turn": "turn",
    "json_valid": "json_valid",
    "schema_valid": "schema_valid",
    "tool_call_valid": "tool_call_valid",
}
# The packed array fields (``console.results.arrays``) and their kind.
ARRAY_FIELDS = {
    "chunk_times": "float",
    "chunk_tokens": "int",
    "output_token_ids": "int",
    "drafted": "int",
    "accepted": "int",
}
# Bump when the packed frame's columns or their meaning change: older packs are then ignored.
RESULTS_PACK_VERSION = 1
RUN_LEVEL = ("arm", "is_baseline", "load", "rate_multiplier", "repeat", "engine")
REQUEST_COLUMNS = ["run_id", *RUN_LEVEL, *[c for c in RESULT_FIELDS.values() if c != "run_id"]]
RUN_COLUMNS = [
    "run_id",
    "arm",
    "load",
    "repeat",
    "wall_s",
    "peak_memory_bytes",
    "mean_util",
    "energy_j",
    "accelerator_count",
    "spec_counters",
]


def _results_frame(*, run_ids: list[int]) -> pd.DataFrame:
    """The result rows of ``run_ids`` as a frame with ``RESULT_FIELDS``' columns. The packed
    arrays come back as raw bytes (no per-row decoding through the ORM) and are unpacked per
    column at once; each row's cell is a 1-d numpy array (float64 or int64)."""
    scalar = [f for f in RESULT_FIELDS if f not in ARRAY_FIELDS]
    raw = {f"_raw_{name}": ExpressionWrapper(F(name), output_field=BinaryField()) for name in ARRAY_FIELDS}
    records = (
        RequestResult.objects.filter(run_id__in=run_ids)
        .annotate(**raw)
        .order_by("run_id", "scheduled_s", "pk")
        .values_list(*scalar, *raw)
    )
    columns = [RESULT_FIELDS[f] for f in scalar]
    frame = _values_frame(records, columns=[*columns, *ARRAY_FIELDS])
    rows = len(frame)
    for name, kind in ARRAY_FIELDS.items():
        frame[RESULT_FIELDS[name]] = (
            pd.Series(_arrays(frame[name].tolist(), kind=kind), dtype=object) if rows else []
        )
    return frame[list(RESULT_FIELDS.values())]


def _values_frame(queryset: QuerySet, *, columns: list[str]) -> pd.DataFrame:
    """A ``values_list`` queryset's rows as a frame, fetched in one pass of the cursor. Django's
    per-value converters (JSON decoding, SQLite's booleans) run column by column on the non-null
    values only: the ORM's row-by-row conversion of every value cost more than the query."""
    compiler = queryset.query.get_compiler(using=queryset.db)
    rows = [row for chunk in compiler.execute_sql(MULTI) for row in chunk]
    frame = pd.DataFrame.from_records(rows, columns=columns, nrows=len(rows))
    if not rows:
        return frame
    fields = [s[0] for s in compiler.select[: compiler.col_count]]
    for pos, (converters, expression) in compiler.get_converters(fields).items():
        column = frame.iloc[:, pos].tolist()
        for i, value in enumerate(column):
            if value is not None:
                for convert in converters:
                    value = convert(value, expression, compiler.connection)
                column[i] = value
        frame[columns[pos]] = pd.Series(column, index=frame.index, dtype=object)
    return frame


def _arrays(blobs: list, *, kind: str) -> list[np.ndarray]:
    """Packed arrays -> one read-only numpy view per row over a single decoded column (no Python
    object per value): ``metrics`` flattens them back with one ``np.concatenate``."""
    flat, lens = unpack_many(blobs, kind=kind)
    flat.flags.writeable = False
    ends = np.cumsum(lens).tolist()
    if not ends:
        return []
    # plain slices: np.split builds each view through swapaxes, about 5x slower per row
    return [flat[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def stored_results_frame(*, run_ids: list[int]) -> pd.DataFrame:
    """The stored result rows of ``run_ids`` (ordered by run, schedule, id) with the per-request
    columns of the analysis contract: failed requests' times NaN, no prompt length 0, an empty
    error None, and a request outside any session its own session of one turn (turn 0)."""
    frame = _results_frame(run_ids=run_ids)
    for column in ("sent_s", "first_token_s", "finish_s"):
        frame[column] = frame[column].astype(float)  # None -> NaN for failed requests
    frame["prompt_tokens"] = frame["prompt_tokens"].fillna(0).astype(np.int64)
    frame["error"] = frame["error"].where(frame["error"].astype(bool), None)
    frame["output_text"] = frame["output_text"].fillna("")
    frame["session_id"] = frame["session_id"].where(frame["session_id"].astype(bool), frame["request_id"])
    frame["turn"] = frame["turn"].fillna(0).astype(np.int64)
    return frame


def _packed_frames(*, run_ids: list[int]) -> tuple[list[pd.DataFrame], list[int]]:
    """The frames of the runs whose pack (``RunResultsPack``) is current, in run order, and the
    runs without one. A pack counts only while its run holds exactly the rows it was made from:
    the same number and the same highest id (rows are replaced as a whole, never edited)."""
    if not run_ids:
        return [], []
    facts = {
        row["run_id"]: (row["n"], row["top"])
        for row in RequestResult.objects.filter(run_id__in=run_ids)
        .values("run_id")
        .annotate(n=Count("id"), top=Max("id"))
        .order_by()
    }
    current = RunResultsPack.objects.filter(run_id__in=list(facts), version=RESULTS_PACK_VERSION)
    blobs = {
        run_id: data
        for run_id, n_rows, top, data in current.values_list("run_id", "n_rows", "max_result_id", "data")
        if facts.get(run_id) == (n_rows, top)
    }
    frames, missing = [], []
    for run_id in run_ids:
        if run_id not in blobs:
            missing.append(run_id)
            continue
        try:
            frames.append(frame_unpack(blobs[run_id]))
        except FramePackError as exc:  # derived data: the rows are still there
            log.warning("run %s: results pack unreadable (%s), reading its rows", run_id, exc)
            missing.append(run_id)
    return frames, missing


def _nan(value) -> float:
    return float("nan") if value is None else float(value)


def results_frames(*, runs: list[Run]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per request per run, and one row per run, in the analysis input contract.

    Times are seconds from each run's replay start; failed requests keep NaN first-token and
    finish times and a non-empty ``error``.
    """
    run_by_id = {r.pk: r for r in runs}
    run_ids = sorted(run_by_id)
    packed, missing = _packed_frames(run_ids=run_ids)
    parts = [*packed, *([stored_results_frame(run_ids=missing)] if missing or not packed else [])]
    frame = frames_concat(parts)
    if packed and missing:  # rows of the unpacked runs came last: back into run order
        frame = frame.sort_values("run_id", kind="stable", ignore_index=True)
    run_level = {
        "arm": {pk: r.arm.label for pk, r in run_by_id.items()},
        "engine": {pk: r.experiment.engine for pk, r in run_by_id.items()},
        "is_baseline": {pk: r.arm.is_baseline for pk, r in run_by_id.items()},
        "load": {pk: r.load_label for pk, r in run_by_id.items()},
        "rate_multiplier": {pk: r.rate_multiplier for pk, r in run_by_id.items()},
        "repeat": {pk: r.repeat for pk, r in run_by_id.items()},
    }
    for column, mapping in run_level.items():
        frame[column] = frame["run_id"].map(mapping)
    requests = frame[REQUEST_COLUMNS]
    telemetry = {t.run_id: t for t in RunTelemetry.objects.filter(run_id__in=list(run_by_id))}
    run_rows = []
    for run in runs:
        t = telemetry.get(run.pk)
        gpus = len((run.hardware or {}).get("gpus") or []) or 1
        peak = None
        if t is not None:
            peak = t.gpu_peak_memory_bytes if t.gpu_peak_memory_bytes else t.peak_memory_bytes
        run_rows.append(
            (
                run.pk,
                run.arm.label,
                run.load_label,
                run.repeat,
                _nan(run.wall_s),
                _nan(peak),
                _nan(t.mean_util if t else None),
                _nan(t.energy_j if t else None),
                gpus if run.queue == "gpu" else 1,
                (t.counters or None) if t is not None else None,
            )
        )
    return requests, pd.DataFrame.from_records(run_rows, columns=RUN_COLUMNS)
