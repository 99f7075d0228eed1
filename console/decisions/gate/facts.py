"""The one adapter over the comparison: :func:`gate_facts_from_summary` reads the typed summary
(``console.analysis.comparison.schema``, version 2) into the facts every criterion reads (see the
package docstring for their keys); :func:`memory_capacity_from_hardware` reads run hardware.

The facts are the gate's own JSON, persisted with its result: a criterion re-evaluates stored
facts without the comparison, so their keys and shapes stay as they are whatever the schema's."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from scipy import stats as sps

from console.analysis.comparison.draft_checks import no_evidence_reason
from console.analysis.comparison.schema import (
    Capacity,
    Comparison,
    DeltaRow,
    Environment,
    HeadlineRow,
    KvRow,
    RunRow,
    Summary,
)
from console.decisions.gate.common import finite, ratio_from_delta

HEADLINE_FIELDS: tuple[str, ...] = (
    "n_requests",
    "n_failed",
    "ttft_s_p95",
    "tpot_s_p50",
    "tpot_s_p95",
    "e2e_s_p95",
    "e2e_s_p99",
    "goodput_rps",
    "deadline_attainment",
    "acceptance_rate",
    "acceptance_rate_lo",
    "acceptance_rate_hi",
    "mean_acceptance_length",
    "tokens_per_pass",
    "accepted_per_pass",
    "cost_per_success_usd",
    "cost_per_million_output_tokens_usd",
    "peak_memory_bytes",
    "n_regressions",
)
ROW_KEYS: tuple[str, ...] = (
    "metric",
    "stat",
    "base",
    "cand",
    "delta",
    "delta_lo",
    "delta_hi",
    "ratio",
    "ratio_lo",
    "ratio_hi",
    "p_value",
    "p_holm",
    "n_requests",
    "measured",
    "reason",
    "noise_floor",
    "verdict",
    "role",
)


def gate_facts_from_summary(
    summary: Comparison | None,
    *,
    candidate_arm: str | None,
    traffic_class: str,
    exact_expected: bool = False,
    capacity_bytes: float | None = None,
) -> dict[str, Any]:
    """Facts for candidate ``candidate_arm`` from a comparison: the stored :class:`Summary`, or
    a :class:`Comparison` as computed (no load order or load weights then). The one function
    that reads the comparison for the gate; see the package docstring for what it returns."""
    facts = _arm_free_facts(summary, candidate_arm=candidate_arm)
    if summary is None or not candidate_arm:
        return facts
    baseline = summary.baseline_arm
    headline = summary.headline
    facts["capacity"] = _capacity_facts(summary.capacity, candidate_arm=candidate_arm, baseline_arm=baseline)
    facts["not_speculating"] = [
        str(row.reason or f"server did not speculate at load {row.load}")
        for row in summary.speculation
        if row.arm == candidate_arm and row.did_not_speculate
    ]
    facts |= _evidence_facts(summary, candidate_arm=candidate_arm, baseline_arm=baseline)
    facts["comparisons"] = _comparisons(summary, candidate_arm=candidate_arm, baseline_arm=baseline)
    facts["quality"] = _quality_facts(summary, candidate_arm=candidate_arm, exact_expected=exact_expected)
    facts["headline"] = [
        {"arm": h.arm, "load": h.load} | {k: getattr(h, k) for k in HEADLINE_FIELDS}
        for h in headline
        if h.arm in (candidate_arm, baseline)
    ]
    rates = [h.acceptance_rate for h in headline if h.arm == candidate_arm and finite(h.acceptance_rate)]
    facts["acceptance_rate_min"] = min(rates) if rates else None
    bounds = [h.acceptance_rate_lo for h in headline if h.arm == candidate_arm and finite(h.acceptance_rate_lo)]
    facts["acceptance_rate_lo_min"] = min(bounds) if bounds else None
    facts["memory"] = _memory_facts(
        headline, candidate_arm=candidate_arm, baseline_arm=baseline, capacity_bytes=capacity_bytes
    )
    sources = summary.memory_sources or {}
    if candidate_arm in sources:
        # where the figure came from; an openai arm without server telemetry says why it has none
        facts["memory"] = (facts["memory"] or {}) | {
            "candidate_source": sources[candidate_arm],
            "baseline_source": sources.get(baseline),
        }
    facts["kv"] = _kv_facts(summary.kv, candidate_arm=candidate_arm, baseline_arm=baseline)
    return facts


def gate_facts_keep_off(
    summary: Comparison | None,
    *,
    traffic_class: str,
    exact_expected: bool = False,
    capacity_bytes: float | None = None,
) -> dict[str, Any]:
    """Facts for keeping speculation off: the arm-free facts, and under ``candidates`` each
    speculative candidate's own facts (an arm configured to speculate by the comparison's
    speculation rows; every non-baseline arm where those rows cannot tell)."""
    facts = _arm_free_facts(summary, candidate_arm=None)
    facts["candidates"] = {}
    if summary is None:
        return facts
    speculative = {row.arm: row.speculative for row in summary.speculation}
    arms = [str(a) for a in summary.arm_order] if isinstance(summary, Summary) else []
    for h in summary.headline:  # a comparison as computed, or one stored without the arm order
        if h.arm not in arms:
            arms.append(h.arm)
    for arm in arms:
        if arm == summary.baseline_arm or speculative.get(arm) is False:
            continue
        facts["candidates"][arm] = gate_facts_from_summary(
            summary, candidate_arm=arm, traffic_class=traffic_class, exact_expected=exact_expected,
            capacity_bytes=capacity_bytes,
        )
    return facts


def _arm_free_facts(summary: Comparison | None, *, candidate_arm: str | None) -> dict[str, Any]:
    """Every fact key, filled with what does not depend on the candidate (loads, endpoints, noise
    floor, baseline stability, cost basis, load weights); the candidate's keys empty. Without a
    comparison every fact is empty (None, [] or {})."""
    stored = summary if isinstance(summary, Summary) else None
    loads = [str(x) for x in stored.load_order] if stored else []
    stats: set[str] = set()
    for h in summary.headline if summary else ():
        if h.load not in loads:
            loads.append(h.load)
        stats |= {d.stat for d in h.deltas if d.measured}
    stability = summary.baseline_stability if summary else None
    return {
        "schema_version": summary.schema_version if summary else None,
        "baseline_arm": summary.baseline_arm if summary else None,
        "candidate_arm": candidate_arm,
        "loads": loads,
        "endpoints": summary.endpoints.model_dump(mode="json") if summary else {},
        "comparisons": [],
        "has_noise_floor": any(f.n_repeat_pairs > 0 for f in summary.noise_floor) if summary else False,
        "baseline_stability": {
            "stable": stability.stable if stability else None,
            "message": stability.message if stability else None,
        },
        "quality": None,
        "memory": None,
        "stats_reported": sorted(stats),
        "acceptance_by_task": bool(summary.acceptance.by_task) if summary else False,
        "notes": [],
        "headline": [],
        "acceptance_rate_min": None,
        "acceptance_rate_lo_min": None,
        "not_speculating": [],
        "no_speculation_evidence": [],
        "config_mismatch": [],
        "environment_mismatch": [],
        "environment_checked": bool(summary.environment and summary.environment.n_runs_recorded) if summary else False,
        "kv": [],
        "cost_basis": summary.cost_basis if summary else None,
        "load_weights": dict(stored.load_weights) if stored else {},
        "capacity": None,
    }


def _evidence_facts(summary: Comparison, *, candidate_arm: str, baseline_arm: str) -> dict[str, Any]:
    """What the speculation and environment checks say against the candidate:
    ``no_speculation_evidence`` ([{``load``, ``reason``}]: a speculative candidate's loads without
    acceptance evidence), ``config_mismatch`` (reasons: the candidate's or the baseline's drafts
    contradict its config) and ``environment_mismatch`` (reasons: the two arms' runs differ in
    hardware, driver or versions)."""
    missing = [
        {"load": row.load, "reason": row.reason or no_evidence_reason(arm=row.arm, load=row.load, arms_with_counters=())}
        for row in summary.speculation
        if row.arm == candidate_arm
        and not row.is_baseline
        and (row.no_evidence or (row.speculative is True and row.source is None))
    ]
    mismatch = [
        str(row.reason or f"config mismatch: {row.arm} at load {row.load}")
        for row in summary.speculation
        if row.arm in (candidate_arm, baseline_arm) and row.config_mismatch
    ]
    return {
        "no_speculation_evidence": missing,
        "config_mismatch": mismatch,
        "environment_mismatch": _environment_mismatch(summary.environment, arms={candidate_arm, baseline_arm}),
    }


def _environment_mismatch(environment: Environment | None, *, arms: set[str]) -> list[str]:
    """The messages of the fields on which the runs of ``arms`` took more than one value."""
    if environment is None:
        return []
    return [
        m.message
        for m in environment.mismatches
        if sum(1 for v in m.values if arms & set(v.arms)) > 1
    ]


def _capacity_facts(
    capacity: Capacity | None, *, candidate_arm: str, baseline_arm: str
) -> dict[str, Any] | None:
    """``{"slo", "candidate", "baseline"}`` from the comparison's ``capacity`` section, each as
    stored (None without a search; an arm None without a row)."""
    if capacity is None:
        return None
    by_arm = {a.arm: a.model_dump(mode="json") for a in capacity.arms}
    return {
        "slo": capacity.slo.model_dump(mode="json"),
        "candidate": by_arm.get(candidate_arm),
        "baseline": by_arm.get(baseline_arm),
    }


def _row_facts(delta: DeltaRow, *, load: str, traffic_class: str | None) -> dict[str, Any]:
    return {k: getattr(delta, k) for k in ROW_KEYS} | {"load": load, "traffic_class": traffic_class}


def _comparisons(summary: Comparison, *, candidate_arm: str, baseline_arm: str) -> list[dict[str, Any]]:
    """The candidate's paired rows: per load (``traffic_class`` None), per traffic-class slice,
    then successes per accelerator-hour from the runs."""
    comparisons = [
        _row_facts(d, load=h.load, traffic_class=None)
        for h in summary.headline
        if h.arm == candidate_arm
        for d in h.deltas
    ]
    comparisons += [
        _row_facts(d, load=r.load, traffic_class=r.value)
        for r in summary.slices
        if r.arm == candidate_arm and r.dimension == "traffic_class"
        for d in r.deltas
    ]
    comparisons += _per_run_rows(summary.runs, candidate_arm=candidate_arm, baseline_arm=baseline_arm)
    return comparisons


def _memory_facts(
    headline: Iterable[HeadlineRow],
    *,
    candidate_arm: str,
    baseline_arm: str,
    capacity_bytes: float | None,
) -> dict[str, Any] | None:
    """Each arm's largest peak memory over the loads (bytes) and the capacity; None when the
    candidate recorded no peak."""
    peaks: dict[str, list[float]] = {"baseline": [], "candidate": []}
    for h in headline:
        who = "candidate" if h.arm == candidate_arm else "baseline" if h.arm == baseline_arm else None
        if who and finite(h.peak_memory_bytes):
            peaks[who].append(float(h.peak_memory_bytes))
    if not peaks["candidate"]:
        return None
    return {
        "baseline_peak_bytes": max(peaks["baseline"]) if peaks["baseline"] else None,
        "candidate_peak_bytes": max(peaks["candidate"]),
        "capacity_bytes": capacity_bytes,
    }


def _kv_facts(rows: Iterable[KvRow], *, candidate_arm: str, baseline_arm: str) -> list[dict[str, Any]]:
    """Per load where the candidate recorded KV figures (an engine that preallocates its KV cache):
    ``load``, ``candidate`` and ``baseline`` (the comparison's ``kv`` rows as stored, baseline
    None if absent)."""
    mine: dict[str, dict[str, Any]] = {}
    base: dict[str, KvRow] = {}
    for r in rows:
        if r.arm == candidate_arm:
            mine[r.load] = {"load": r.load, "candidate": r.model_dump(mode="json"), "baseline": None}
        elif r.arm == baseline_arm:
            base[r.load] = r
    for load, fact in mine.items():
        fact["baseline"] = base[load].model_dump(mode="json") if load in base else None
    return list(mine.values())


def _per_run_rows(runs: Iterable[RunRow], *, candidate_arm: str, baseline_arm: str) -> list[dict]:
    """``successes_per_accelerator_hour`` (successful requests per accelerator-hour) per load:
    Welch t interval on the difference of the per-run means when both arms have two runs."""
    values: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        hours = r.accelerator_hours
        if r.arm not in (candidate_arm, baseline_arm) or not (finite(hours) and hours > 0):
            continue
        who = "cand" if r.arm == candidate_arm else "base"
        values.setdefault((r.load, who), []).append(float(r.successes) / float(hours))
    rows = []
    for load in sorted({load for load, _ in values}):
        b, c = values.get((load, "base"), []), values.get((load, "cand"), [])
        if not b or not c:
            continue
        mb, mc = sum(b) / len(b), sum(c) / len(c)
        row: dict[str, Any] = {
            "load": load,
            "traffic_class": None,
            "metric": "successes_per_accelerator_hour",
            "stat": "mean",
            "base": mb,
            "cand": mc,
            "delta": mc - mb,
            "delta_lo": None,
            "delta_hi": None,
            "noise_floor": None,
            "measured": False,
            "reason": "needs two runs per arm",
            "n_runs": [len(b), len(c)],
        }
        if len(b) >= 2 and len(c) >= 2:
            vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
            vc = sum((x - mc) ** 2 for x in c) / (len(c) - 1) / len(c)
            se = math.sqrt(vb + vc)
            if se > 0:
                df = (vb + vc) ** 2 / ((vb**2 / (len(b) - 1)) + (vc**2 / (len(c) - 1)))
                half = float(sps.t.ppf(0.975, df)) * se
            else:
                half = 0.0
            row["delta_lo"], row["delta_hi"] = mc - mb - half, mc - mb + half
            row["measured"], row["reason"] = True, None
        row |= ratio_from_delta(row)
        rows.append(row)
    return rows


def _quality_facts(summary: Comparison, *, candidate_arm: str, exact_expected: bool) -> dict[str, Any] | None:
    checks = [
        {
            "slice": r.task,
            "load": r.load,
            "check": r.check,
            "n": r.n_applicable,
            "regressions": r.regressions,
            "improvements": r.improvements,
            "mcnemar_p": r.mcnemar_p,
            "baseline_flip_rate": r.baseline_flip_rate,
        }
        # Graded correctness ("correct": baseline right, candidate wrong) counts like any check.
        for r in (*summary.quality.counts, *summary.correctness.counts)
        if r.arm == candidate_arm and (exact_expected or r.check != "exact_match")
    ]
    if not checks:
        return None
    return {"exact_expected": exact_expected, "checks": checks}


def memory_capacity_from_hardware(hardware: Iterable[Mapping[str, Any]]) -> float | None:
    """Memory capacity in bytes from run hardware records (``workers.hardware``): the smallest
    GPU's memory on GPU hosts (the summary's peak is GPU memory there), else host memory."""
    gpu, host = [], []
    for hw in hardware:
        for g in hw.get("gpus") or []:
            if finite(g.get("memory_bytes")):
                gpu.append(float(g["memory_bytes"]))
        if finite(hw.get("memory_bytes")):
            host.append(float(hw["memory_bytes"]))
    if gpu:
        return min(gpu)
    return min(host) if host else None
