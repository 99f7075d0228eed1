"""Reads for analysis: results as the DataFrames the pure metric code takes, and the cached
comparison of an experiment."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable

import numpy as np
import pandas as pd
from django.db.models import BinaryField, ExpressionWrapper, F, QuerySet
from django.db.models.sql.constants import MULTI

from console.analysis.arrays import unpack_many
from console.analysis.comparison.schema import Summary, summary_load
from console.analysis.frame_pack import frames_concat
from console.analysis.models import ComparisonCache, RequestResult, RunTelemetry
from console.experiments.models import Experiment, Run
from console.jsonutil import json_safe

log = logging.getLogger(__name__)

# RequestResult fields (or trace_request__ lookups) -> analysis contract column.
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
# The packed array fields (``console.analysis.arrays``) and their kind.
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
        frame[RESULT_FIELDS[name]] = pd.Series(_arrays(frame[name].tolist(), kind=kind), dtype=object) if rows else []
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
    from django.db.models import Count, Max

    from console.analysis.frame_pack import FramePackError, frame_unpack
    from console.analysis.models import RunResultsPack

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


def experiment_finished_runs(*, experiment: Experiment) -> list[Run]:
    return list(
        Run.objects.filter(experiment=experiment, status=Run.Status.DONE)
        .select_related("arm", "experiment")
        .order_by("order")
    )


def experiment_cross_vocabulary_arms(*, experiment: Experiment) -> list[str]:
    """Labels of the arms whose runs recorded a draft with another vocabulary than the target's
    (``spec.draft_cross_vocabulary``), in arm order."""
    from console.analysis.comparison.spec import draft_cross_vocabulary

    flagged: dict[str, int] = {}
    for label, position, versions in Run.objects.filter(experiment=experiment).values_list(
        "arm__label", "arm__position", "versions"
    ):
        if draft_cross_vocabulary(versions):
            flagged[label] = position
    return sorted(flagged, key=lambda label: flagged[label])


def _cache_key(experiment: Experiment, runs: list[Run], version: int) -> str:
    ident = [(r.pk, r.attempt, r.finished_at.isoformat() if r.finished_at else None) for r in runs]
    # The parameters as stored (an instance fresh from a form may hold 1 where the row holds 1.0).
    stored = (
        Experiment.objects.filter(pk=experiment.pk)
        .values_list("deadlines", "cost_per_hour_usd", "power_price_usd_per_kwh", "endpoints")
        .first()
    )
    params = [*(stored or ()), version]
    return hashlib.sha256(json.dumps([ident, params], default=str, sort_keys=True).encode()).hexdigest()


# The schema's version, then a count of additive changes to what is stored (3: "speculation",
# 4: "kv", 5: every slice's intervals, slice CDFs, first divergences, 6: graded correctness, which
# changes success, 7: "sessions", 8: accelerator-hours on busy time, "cost_basis", which changes
# every cost, 9: "capacity" from the capacity-search steps, which leave the matrix's loads,
# "cost_basis" "capacity" where a search ran, "load_weights"): a new count recomputes older
# stored comparisons.
COMPARISON_VERSION = 9


def comparison_key(*, experiment: Experiment, runs: list[Run] | None = None) -> str:
    """The identity of the comparison the finished runs call for (their ids, attempts, finish
    times, and the experiment's parameters)."""
    runs = experiment_finished_runs(experiment=experiment) if runs is None else runs
    return _cache_key(experiment, runs, COMPARISON_VERSION)


def comparison_state(*, experiment: Experiment) -> str:
    """``"ready"`` (stored and current), ``"stale"`` (stored for other runs: being recomputed),
    ``"missing"`` (not computed yet) or ``"no baseline"`` (no finished baseline run)."""
    runs = experiment_finished_runs(experiment=experiment)
    if not any(r.arm.is_baseline for r in runs):
        return "no baseline"
    cached = ComparisonCache.objects.filter(experiment=experiment).values_list("key", flat=True).first()
    if not cached:  # no row, or one holding only the progress of a first computation
        return "missing"
    return "ready" if cached == comparison_key(experiment=experiment, runs=runs) else "stale"


# The stages a comparison computation reports (``comparison_progress``), in order.
COMPARISON_STAGES = ("loading results", "computing metrics and intervals", "storing")


def comparison_progress(*, experiment: Experiment) -> dict | None:
    """The computation of the experiment's comparison a worker has under way, as it last
    reported: ``{"stage", "step", "steps", "elapsed_s"}`` (step 1-based of ``steps``; seconds
    since it started). None when none is running."""
    progress = (
        ComparisonCache.objects.filter(experiment=experiment).values_list("progress", flat=True).first()
    )
    if not progress or not progress.get("started_at"):
        return None
    from django.utils import timezone
    from django.utils.dateparse import parse_datetime

    started = parse_datetime(progress["started_at"])
    elapsed = (timezone.now() - started).total_seconds() if started else None
    return {
        "stage": progress.get("stage"),
        "step": progress.get("step"),
        "steps": progress.get("steps"),
        "elapsed_s": elapsed,
    }


def comparison_for_experiment(*, experiment: Experiment) -> dict | None:
    """The stored comparison of the experiment, as the last computation left it (it may be
    stale: ``comparison_state`` says). Never computes: a task does that when runs finish
    (``console.analysis.services.comparison_refresh``)."""
    data = ComparisonCache.objects.filter(experiment=experiment).values_list("data", flat=True).first()
    return data or None


def comparison_summary_for_experiment(*, experiment: Experiment) -> Summary | None:
    """The stored comparison of the experiment read through the typed contract
    (``console.analysis.comparison.schema``), as :func:`comparison_for_experiment` finds it;
    None when none is stored. Raises ``schema.ComparisonSchemaError`` for one stored in another
    schema version or shape (its message says to recompute it)."""
    data = comparison_for_experiment(experiment=experiment)
    return None if data is None else summary_load(data)


def comparison_compute_for(
    *, experiment: Experiment, runs: list[Run], n_boot: int, progress: Callable[[str], None] | None = None
) -> dict:
    """Compute (never store) the comparison of ``runs``. ``progress`` is called with each stage
    of ``COMPARISON_STAGES`` as it starts."""
    from console.analysis.comparison import comparison_compute

    report = progress or (lambda stage: None)
    report(COMPARISON_STAGES[0])
    # Capacity-search steps (``Run.capacity_step``) are their own section: each arm's steps run
    # at its own bisected rates, so they never join the matrix's paired comparisons.
    steps = [r for r in runs if r.capacity_step is not None]
    runs = [r for r in runs if r.capacity_step is None]
    if not any(r.arm.is_baseline for r in runs):
        raise ValueError(f"experiment {experiment.pk}: no finished baseline run of its matrix yet")
    requests, run_frame = results_frames(runs=runs)
    capacity_requests = capacity_runs = None
    if steps and experiment.capacity_search:
        capacity_requests, capacity_runs = results_frames(runs=steps)
        capacity_requests["capacity_step"] = capacity_requests["run_id"].map({r.pk: r.capacity_step for r in steps})
    report(COMPARISON_STAGES[1])
    references = grading_references(runs=runs + steps)
    arms = list(experiment.arms.select_related("config"))
    baseline = next(a.label for a in arms if a.is_baseline)
    summary = comparison_compute(
        requests,
        run_frame,
        deadlines=experiment.deadlines,
        cost_per_hour_usd=experiment.cost_per_hour_usd,
        power_price_usd_per_kwh=experiment.power_price_usd_per_kwh,
        baseline_arm=baseline,
        sweeps=experiment_sweeps(arms=arms),
        endpoints=experiment.endpoints or None,
        n_boot=n_boot,
        speculative_arms={a.label for a in arms if not a.is_baseline and a.config.speculative_config},
        references=references,
        capacity_search=experiment.capacity_search,
        capacity_requests=capacity_requests,
        capacity_runs=capacity_runs,
        arm_order=[a.label for a in sorted(arms, key=lambda a: a.position)],
    )
    summary["arm_order"] = [a.label for a in sorted(arms, key=lambda a: a.position)]
    summary["load_order"] = [lv["label"] for lv in experiment.load_levels]
    # The workload mix the experiment declared (gate criterion 1); empty = none declared.
    summary["load_weights"] = {
        lv["label"]: lv["weight"] for lv in experiment.load_levels if lv.get("weight") is not None
    }
    return json_safe(summary)


def grading_references(*, runs: list[Run]) -> dict[str, dict | None]:
    """The grading reference (``console.analysis.grading.reference_of``) of every request the runs
    replayed, by request id: one row per trace request, not per result."""
    from console.analysis.grading import reference_of
    from console.traces.models import TraceRequest

    used = RequestResult.objects.filter(run_id__in=[r.pk for r in runs]).values("trace_request_id")
    rows = TraceRequest.objects.filter(pk__in=used).values_list("request_id", "metadata", "prompt")
    return {rid: reference_of(meta, prompt=prompt) for rid, meta, prompt in rows.iterator(chunk_size=2000)}


def experiment_sweeps(*, arms) -> dict[str, dict[str, int]]:
    """Candidate arms that differ only in draft length, grouped: ``{sweep: {arm: k}}``."""
    groups: dict[str, dict[str, int]] = {}
    for arm in arms:
        spec = arm.config.speculative_config
        if not spec or not isinstance(spec.get("num_speculative_tokens"), int):
            continue
        rest = {k: v for k, v in spec.items() if k != "num_speculative_tokens"}
        name = spec.get("method", "?") + (f"({spec['model']})" if spec.get("model") else "")
        key = name + " " + json.dumps(rest, sort_keys=True)
        groups.setdefault(key, {})[arm.label] = spec["num_speculative_tokens"]
    return {key.split(" ", 1)[0]: members for key, members in groups.items() if len(members) >= 2}


def model_catalog_families() -> dict[str, dict]:
    """The ``hf`` model catalog as the fit assessment reads it: {name: {family, size_bytes}},
    the family being the first word of the catalog's tokenizer description."""
    from workers.catalog import CATALOG

    return {
        name: {"family": m.tokenizer_family.split()[0], "size_bytes": m.size_bytes}
        for name, m in CATALOG.items()
    }


def experiment_fit_inputs_trace(*, experiment: Experiment) -> dict:
    """The trace side of the fit assessment, in one light query over the experiment's split:
    traffic classes, the trace's mean arrival rate (requests/s), and per request its output
    limit (tokens, capped by the experiment's) and recorded output length (or None)."""
    from console.analysis.fit import RECORDED_OUTPUT_KEYS, first_token_count

    qs = experiment.trace.requests.all()
    if experiment.split != "all":
        qs = qs.filter(split=experiment.split)
    paths = ["metadata__" + "__".join(p) for p in RECORDED_OUTPUT_KEYS]
    classes: dict[str, int] = {}
    limits, recorded = [], []
    first = last = None
    rows = qs.values_list("traffic_class", "max_tokens", "arrival_s", *paths)
    for cls, max_tokens, arrival, *values in rows:
        classes[cls] = classes.get(cls, 0) + 1
        limit = min(max_tokens, experiment.output_limit) if experiment.output_limit else max_tokens
        limits.append(limit)
        found = first_token_count(values)
        recorded.append(None if found is None else min(found, limit))
        first = arrival if first is None else min(first, arrival)
        last = arrival if last is None else max(last, arrival)
    n = len(limits)
    span = (last - first) if n > 1 and last is not None and first is not None else 0.0
    rate = (n - 1) / span if span > 0 else None
    return {"classes": classes, "rate_rps": rate, "output_limits": limits, "recorded_output_tokens": recorded}


def experiment_fit_assessment(*, experiment: Experiment) -> dict:
    """The experiment's fit assessment (``console.analysis.fit.fit_assess``): from the trace and
    the configs before any run, refined by the fit facts the worker cached for each finished
    baseline run. Reads stored data only."""
    from console.analysis.fit import FIT_VERSION, fit_assess
    from console.analysis.models import RunSummary

    arms = list(experiment.arms.select_related("config"))
    baseline_runs = experiment.runs.filter(status=Run.Status.DONE, arm__is_baseline=True)
    runs = []
    summaries = RunSummary.objects.filter(run__in=baseline_runs).order_by("run__order")
    for data in summaries.values_list("data", flat=True):
        stats = (data or {}).get("fit")
        if stats and stats.get("version") == FIT_VERSION:
            runs.append(stats)
    pending = baseline_runs.count() - len(runs)
    result = fit_assess(
        trace=experiment_fit_inputs_trace(experiment=experiment),
        engine=experiment.engine,
        target_model=experiment.target_model,
        specs=[a.config.speculative_config for a in arms if a.config.speculative_config],
        load_levels=list(experiment.load_levels or []),
        runs=runs,
        catalog=model_catalog_families(),
    )
    result["pending_runs"] = pending
    return result
