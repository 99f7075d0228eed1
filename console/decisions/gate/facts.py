"""The one adapter over the comparison summary: :func:`gate_facts_from_summary` reads schema
version 2 (``console.analysis.comparison.schema``) into the facts every criterion reads (see the
package docstring for their keys); :func:`memory_capacity_from_hardware` reads run hardware."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from scipy import stats as sps

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
    summary: Mapping[str, Any] | None,
    *,
    candidate_arm: str | None,
    traffic_class: str,
    exact_expected: bool = False,
    capacity_bytes: float | None = None,
) -> dict[str, Any]:
    """Facts for candidate ``candidate_arm`` from a comparison summary (schema version 2). The
    one function that knows that schema; see the package docstring for what it returns."""
    summary = summary or {}
    baseline = summary.get("baseline_arm")
    headline = [h for h in summary.get("headline") or [] if isinstance(h, Mapping)]
    facts = _arm_free_facts(summary, headline, candidate_arm=candidate_arm)
    if not candidate_arm:
        return facts
    facts["capacity"] = _capacity_facts(summary, candidate_arm=candidate_arm, baseline_arm=baseline)
    facts["not_speculating"] = [
        str(row.get("reason") or f"server did not speculate at load {row.get('load')}")
        for row in summary.get("speculation") or []
        if isinstance(row, Mapping) and row.get("arm") == candidate_arm and row.get("did_not_speculate")
    ]
    facts["comparisons"] = _comparisons(summary, headline, candidate_arm=candidate_arm, baseline_arm=baseline)
    facts["quality"] = _quality_facts(summary, candidate_arm=candidate_arm, exact_expected=exact_expected)
    facts["headline"] = [
        {"arm": h.get("arm"), "load": h.get("load")} | {k: h.get(k) for k in HEADLINE_FIELDS}
        for h in headline
        if h.get("arm") in (candidate_arm, baseline)
    ]
    rates = [
        float(h["acceptance_rate"])
        for h in headline
        if h.get("arm") == candidate_arm and finite(h.get("acceptance_rate"))
    ]
    facts["acceptance_rate_min"] = min(rates) if rates else None
    facts["memory"] = _memory_facts(
        headline, candidate_arm=candidate_arm, baseline_arm=baseline, capacity_bytes=capacity_bytes
    )
    facts["kv"] = _kv_facts(summary.get("kv") or [], candidate_arm=candidate_arm, baseline_arm=baseline)
    return facts


def _arm_free_facts(
    summary: Mapping[str, Any], headline: list[Mapping[str, Any]], *, candidate_arm: str | None
) -> dict[str, Any]:
    """Every fact key, filled with what does not depend on the candidate (loads, endpoints, noise
    floor, baseline stability, cost basis, load weights); the candidate's keys empty."""
    baseline = summary.get("baseline_arm")
    loads = [str(x) for x in summary.get("load_order") or []]
    for h in headline:
        if str(h.get("load")) not in loads:
            loads.append(str(h.get("load")))
    stats: set[str] = set()
    for h in headline:
        stats |= {str(d.get("stat")) for d in h.get("deltas") or [] if d.get("measured")}
    acceptance = summary.get("acceptance") or {}
    floors = summary.get("noise_floor") or []
    stability = summary.get("baseline_stability") or {}
    return {
        "schema_version": summary.get("schema_version"),
        "baseline_arm": baseline,
        "candidate_arm": candidate_arm,
        "loads": loads,
        "endpoints": dict(summary.get("endpoints") or {}),
        "comparisons": [],
        "has_noise_floor": any(int(f.get("n_repeat_pairs") or 0) > 0 for f in floors),
        "baseline_stability": {"stable": stability.get("stable"), "message": stability.get("message")},
        "quality": None,
        "memory": None,
        "stats_reported": sorted(stats),
        "acceptance_by_task": bool(acceptance.get("by_task")) if isinstance(acceptance, Mapping) else False,
        "notes": [],
        "headline": [],
        "acceptance_rate_min": None,
        "not_speculating": [],
        "kv": [],
        "cost_basis": summary.get("cost_basis"),
        "load_weights": dict(summary.get("load_weights") or {}),
        "capacity": None,
    }


def _capacity_facts(
    summary: Mapping[str, Any], *, candidate_arm: str, baseline_arm: str | None
) -> dict[str, Any] | None:
    """``{"slo", "candidate", "baseline"}`` from the summary's ``capacity`` section (None without one)."""
    capacity = summary.get("capacity")
    if not isinstance(capacity, Mapping):
        return None
    by_arm = {a.get("arm"): a for a in capacity.get("arms") or [] if isinstance(a, Mapping)}
    return {
        "slo": capacity.get("slo"),
        "candidate": by_arm.get(candidate_arm),
        "baseline": by_arm.get(baseline_arm),
    }


def _comparisons(
    summary: Mapping[str, Any],
    headline: list[Mapping[str, Any]],
    *,
    candidate_arm: str,
    baseline_arm: str | None,
) -> list[dict[str, Any]]:
    """The candidate's paired rows: per load (``traffic_class`` None), per traffic-class slice,
    then successes per accelerator-hour from the runs."""
    comparisons: list[dict[str, Any]] = []
    for h in headline:
        if h.get("arm") != candidate_arm:
            continue
        for d in h.get("deltas") or []:
            comparisons.append({k: d.get(k) for k in ROW_KEYS} | {"load": str(h["load"]), "traffic_class": None})
    for r in summary.get("slices") or []:
        if r.get("arm") != candidate_arm or r.get("dimension") != "traffic_class":
            continue
        for d in r.get("deltas") or []:
            comparisons.append(
                {k: d.get(k) for k in ROW_KEYS} | {"load": str(r.get("load")), "traffic_class": r.get("value")}
            )
    comparisons += _per_run_rows(summary.get("runs") or [], candidate_arm=candidate_arm, baseline_arm=baseline_arm)
    return comparisons


def _memory_facts(
    headline: list[Mapping[str, Any]],
    *,
    candidate_arm: str,
    baseline_arm: str | None,
    capacity_bytes: float | None,
) -> dict[str, Any] | None:
    """Each arm's largest peak memory over the loads (bytes) and the capacity; None when the
    candidate recorded no peak."""
    peaks: dict[str, list[float]] = {"baseline": [], "candidate": []}
    for h in headline:
        who = "candidate" if h.get("arm") == candidate_arm else "baseline" if h.get("arm") == baseline_arm else None
        if who and finite(h.get("peak_memory_bytes")):
            peaks[who].append(float(h["peak_memory_bytes"]))
    if not peaks["candidate"]:
        return None
    return {
        "baseline_peak_bytes": max(peaks["baseline"]) if peaks["baseline"] else None,
        "candidate_peak_bytes": max(peaks["candidate"]),
        "capacity_bytes": capacity_bytes,
    }


def _kv_facts(rows: Iterable[Any], *, candidate_arm: str, baseline_arm: str | None) -> list[dict[str, Any]]:
    """Per load where the candidate recorded KV figures (an engine that preallocates its KV cache):
    ``load``, ``candidate`` and ``baseline`` (the comparison's ``kv`` rows, baseline None if absent)."""
    mine: dict[str, dict[str, Any]] = {}
    base: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        if not isinstance(r, Mapping):
            continue
        if r.get("arm") == candidate_arm:
            mine[str(r.get("load"))] = {"load": str(r.get("load")), "candidate": dict(r), "baseline": None}
        elif r.get("arm") == baseline_arm:
            base[str(r.get("load"))] = r
    for load, fact in mine.items():
        fact["baseline"] = dict(base[load]) if load in base else None
    return list(mine.values())


def _per_run_rows(runs: Iterable[Mapping[str, Any]], *, candidate_arm: str, baseline_arm: str | None) -> list[dict]:
    """``successes_per_accelerator_hour`` (successful requests per accelerator-hour) per load:
    Welch t interval on the difference of the per-run means when both arms have two runs."""
    values: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        hours, ok = r.get("accelerator_hours"), r.get("successes")
        if r.get("arm") not in (candidate_arm, baseline_arm) or not (finite(hours) and hours > 0 and finite(ok)):
            continue
        who = "cand" if r.get("arm") == candidate_arm else "base"
        values.setdefault((str(r.get("load")), who), []).append(float(ok) / float(hours))
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


def _quality_facts(summary: Mapping[str, Any], *, candidate_arm: str, exact_expected: bool) -> dict[str, Any] | None:
    quality = summary.get("quality") or {}
    correctness = summary.get("correctness") or {}
    checks = []
    # Graded correctness ("correct": baseline right, candidate wrong) counts like any check.
    counts = [*(quality.get("counts") or []), *(correctness.get("counts") or [])]
    for r in counts:
        if r.get("arm") != candidate_arm:
            continue
        if r.get("check") == "exact_match" and not exact_expected:
            continue
        checks.append(
            {
                "slice": str(r.get("task")),
                "load": str(r.get("load")),
                "check": r.get("check"),
                "n": int(r.get("n_applicable") or 0),
                "regressions": int(r.get("regressions") or 0),
                "improvements": int(r.get("improvements") or 0),
                "mcnemar_p": r.get("mcnemar_p"),
                "baseline_flip_rate": r.get("baseline_flip_rate"),
            }
        )
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
