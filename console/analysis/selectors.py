"""Reads for analysis: an experiment's finished runs, what its comparison is computed from, and
the cached comparison (a run's results as frames come from ``console.results.selectors``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from django.core.cache import cache
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from console.analysis.comparison import comparison_compute
from console.analysis.comparison.schema import Summary, summary_load
from console.analysis.comparison.spec import draft_cross_vocabulary
from console.analysis.fit_assessment import fit_assess
from console.analysis.fit_stats import (
    FIT_VERSION,
    RECORDED_OUTPUT_KEYS,
    candidate_fit_stats,
    first_token_count,
)
from console.analysis.grading import reference_of
from console.analysis.models import ComparisonCache
from console.analysis.slices import RUN_BUCKET_DIMENSION
from console.experiments.models import Experiment, Run
from console.jsonutil import json_safe
from console.results.models import RequestResult, RunSummary
from console.results.selectors import results_frames
from console.traces.models import TraceRequest
from workers.catalog.entries import CATALOG


def experiment_finished_runs(*, experiment: Experiment) -> list[Run]:
    return list(
        Run.objects.filter(experiment=experiment, status=Run.Status.DONE)
        .select_related("arm", "experiment")
        .order_by("order")
    )


def experiment_cross_vocabulary_arms(*, experiment: Experiment) -> list[str]:
    """Labels of the arms whose runs recorded a draft with another vocabulary than the target's
    (``spec.draft_cross_vocabulary``), in arm order."""
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
# "cost_basis" "capacity" where a search ran, "load_weights", 10: "environment", the speculation
# rows' no_evidence and config_mismatch, 11: the declared output bucket as a slice dimension,
# 12: the headline's acceptance interval): a new count recomputes older stored comparisons.
COMPARISON_VERSION = 12


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


def comparison_stored_key(*, experiment: Experiment) -> str | None:
    """What names the stored comparison's current version: its key and when it was stored (a
    forced recomputation of the same runs keeps the key); None when none is stored. One narrow
    query: what a page needs to know whether its cached rendering is current."""
    row = ComparisonCache.objects.filter(experiment=experiment).values_list("key", "computed_at").first()
    return f"{row[0]}@{row[1].isoformat()}" if row and row[0] else None


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
    report = progress or (lambda stage: None)
    report(COMPARISON_STAGES[0])
    # Capacity-search steps (``Run.capacity_step``) are their own section: each arm's steps run
    # at its own bisected rates, so they never join the matrix's paired comparisons.
    steps = [r for r in runs if r.capacity_step is not None]
    runs = [r for r in runs if r.capacity_step is None]
    if not any(r.arm.is_baseline for r in runs):
        raise ValueError(f"experiment {experiment.pk}: no finished baseline run of its matrix yet")
    requests, run_frame = results_frames(runs=runs)
    # Each run's declared output bucket: a slice dimension where two or more were declared.
    requests[RUN_BUCKET_DIMENSION] = requests["run_id"].map({r.pk: r.output_bucket for r in runs})
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
        speculative_configs={a.label: a.config.speculative_config for a in arms},
        run_environments={r.pk: {"hardware": r.hardware, "versions": r.versions} for r in runs},
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
    return {
        name: {"family": m.tokenizer_family.split()[0], "size_bytes": m.size_bytes}
        for name, m in CATALOG.items()
    }


def experiment_fit_inputs_trace(*, experiment: Experiment) -> dict:
    """The trace side of the fit assessment, in one light query over the experiment's split:
    traffic classes, the trace's mean arrival rate (requests/s), and per request its output
    limit (tokens, capped by the experiment's) and recorded output length (or None).

    Cached by what it reads: a trace's requests never change after import (its sha256 names
    them), so the key is the trace, its hash, the split and the output limit. A 10,000-request
    trace took 100 ms to walk on every view of the experiment page."""
    trace = experiment.trace
    key = f"fit-inputs-trace:{trace.pk}:{trace.sha256}:{experiment.split}:{experiment.output_limit}"
    cached = cache.get(key)
    if cached is None:
        cached = _fit_inputs_trace(experiment)
        cache.set(key, cached, timeout=24 * 3600)
    return cached


def _fit_inputs_trace(experiment: Experiment) -> dict:
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
    baseline run and by the candidates' acceptance and timing in the stored comparison. Reads
    stored data only."""
    arms = list(experiment.arms.select_related("config"))
    baseline_runs = experiment.runs.filter(status=Run.Status.DONE, arm__is_baseline=True)
    runs = []
    summaries = RunSummary.objects.filter(run__in=baseline_runs).order_by("run__order")
    for data in summaries.values_list("data", flat=True):
        stats = (data or {}).get("fit")
        if stats and stats.get("version") == FIT_VERSION:
            runs.append(stats)
    pending = baseline_runs.count() - len(runs)
    # The drafter condition reads the stored comparison's candidates: three keys, not the whole.
    stored = ComparisonCache.objects.filter(experiment=experiment)
    keys = stored.values_list("data__headline", "data__speculation", "data__baseline_arm").first()
    headline, speculation, base = keys or (None, None, None)
    candidates = candidate_fit_stats(
        headline=headline or [],
        speculation=speculation or [],
        baseline_arm=base,
        configs={a.label: a.config.speculative_config for a in arms if not a.is_baseline},
    )
    result = fit_assess(
        trace=experiment_fit_inputs_trace(experiment=experiment),
        engine=experiment.engine,
        target_model=experiment.target_model,
        specs=[a.config.speculative_config for a in arms if a.config.speculative_config],
        load_levels=list(experiment.load_levels or []),
        runs=runs,
        catalog=model_catalog_families(),
        candidates=candidates,
    )
    result["pending_runs"] = pending
    return result
