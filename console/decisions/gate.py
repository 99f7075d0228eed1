"""The release gate: five criteria computed from the comparison, never typed in.

Pure functions over plain dicts; no Django. Each criterion returns
``{"key", "title", "status" ("pass" | "fail" | "not_measured"), "summary", "numbers", "evidence",
"notes"}``; ``numbers`` is a list of ``{"label", "value", "unit"}`` rows (the figures behind the
verdict), ``evidence`` a list of ``{"label", "anchor"}`` (a section of the comparison page).

Facts (the gate's only input besides its settings)
--------------------------------------------------
``gate_facts_from_summary`` is the one place that reads the comparison summary of
``console.analysis``; every criterion reads only the facts below, so a change of the summary's
schema touches one function.

- ``baseline_arm``, ``candidate_arm`` (labels), ``loads`` (load labels in the experiment's order).
- ``comparisons``: candidate-vs-baseline paired rows, one per (load, traffic_class, metric, stat):
  ``traffic_class`` None for all requests; ``base``/``cand`` point estimates, ``delta`` = cand -
  base with ``delta_lo``/``delta_hi`` (interval), ``ratio`` = cand / base with ``ratio_lo``/
  ``ratio_hi``, ``noise_floor`` (A/A noise floor in the metric's unit, None when unknown).
  Units: ``*_s`` seconds, ``goodput_rps`` requests/s, ``successes_per_accelerator_hour``
  successful requests per accelerator-hour.
- ``quality``: None when not measured, else ``{"exact_expected": bool, "slices": [{"slice",
  "n", "regressions": {check: count}}]}``; a regression is a request valid in the baseline and
  invalid in the candidate; ``exact_match`` counts outputs that differ from the baseline's and
  only matters when exact output is expected (greedy decoding).
- ``stats_reported`` (the ``pNN``/``mean`` statistics the comparison reports) and
  ``acceptance_by_task`` (whether it has acceptance tables by task): read by the checklist.
- ``memory``: None when not measured, else ``{"baseline_peak_bytes", "candidate_peak_bytes",
  "capacity_bytes"}`` (bytes; capacity None when unknown).

Settings (per decision; ``DEFAULT_SETTINGS`` fills what is missing)
------------------------------------------------------------------
``improvement_metric`` (criterion 1), ``load_weights`` ({load: weight}, missing = 1: the
workload mix over load levels), ``loads_in_scope`` (the loads the proposal covers; empty = all),
``latency_metrics`` and ``latency_stat`` (criterion 2), ``quality_thresholds`` ({slice: max
regression rate as a fraction}, ``"*"`` for other slices), ``memory_fraction`` (criterion 4,
fraction of capacity), ``memory_capacity_bytes`` (overrides the measured capacity),
``stability_metrics`` (``"metric:stat"`` strings, criterion 5).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

PASS, FAIL, NOT_MEASURED = "pass", "fail", "not_measured"

CRITERIA: tuple[tuple[str, str], ...] = (
    ("task_improvement", "Workload-weighted improvement in acceptable completed tasks"),
    ("latency_benefit", "Clear latency benefit for the promised class"),
    ("quality", "No regression in critical quality"),
    ("memory_headroom", "Memory headroom"),
    ("load_stability", "Stable across load levels"),
)

HIGHER_IS_BETTER = frozenset(
    {
        "goodput_rps",
        "successes_per_accelerator_hour",
        "completed_rps",
        "output_tokens_per_s",
        "attainment",
        "acceptance_rate",
    }
)
VALIDITY_CHECKS: tuple[str, ...] = ("json_valid", "schema_valid", "tool_valid")

DEFAULT_SETTINGS: dict[str, Any] = {
    "improvement_metric": "successes_per_accelerator_hour",
    "improvement_fallback_metric": "goodput_rps",
    "load_weights": {},
    "loads_in_scope": [],
    "latency_metrics": ["tpot_s", "e2e_s"],
    "latency_stat": "p95",
    "quality_thresholds": {"json": 0.0, "tool_call": 0.0, "*": 0.01},
    "memory_fraction": 0.9,
    "memory_capacity_bytes": None,
    "stability_metrics": [
        "tpot_s:p95",
        "e2e_s:p95",
        "ttft_s:p95",
        "goodput_rps:mean",
        "successes_per_accelerator_hour:mean",
    ],
}


def gate_settings_resolve(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """DEFAULT_SETTINGS overlaid with ``settings`` (unknown keys are kept, so they stay visible)."""
    out = {
        k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
        for k, v in DEFAULT_SETTINGS.items()
    }
    for key, value in (settings or {}).items():
        if value is None and key != "memory_capacity_bytes":
            continue
        out[key] = value
    return out


# ---------------------------------------------------------------- the one adapter over the summary


def gate_facts_from_summary(
    summary: Mapping[str, Any] | None, *, candidate_arm: str | None, traffic_class: str
) -> dict[str, Any]:
    """Facts for the candidate ``candidate_arm`` from a ``console.analysis`` comparison summary.

    Reads ``baseline_arm``, ``loads``, ``comparisons`` (or ``headline``) rows with ``arm``,
    ``load``, optional ``traffic_class``, ``metric``, ``stat`` and the interval columns;
    ``noise_floor`` rows (``load``, ``metric``, ``stat``, ``noise_floor``) when a row lacks its
    own; ``quality.rates`` (``arm``, ``task``, ``n_requests``) and ``quality.regressions``
    (``arm``, ``task``, ``check``); ``quality.exact_expected``; ``resources`` rows (``arm``,
    ``peak_memory_bytes``, optional ``capacity_bytes``). Anything absent becomes "not measured".
    """
    summary = summary or {}
    baseline = summary.get("baseline_arm")
    facts: dict[str, Any] = {
        "baseline_arm": baseline,
        "candidate_arm": candidate_arm,
        "loads": list(summary.get("loads") or []),
        "comparisons": [],
        "quality": None,
        "memory": None,
        "stats_reported": sorted(
            {
                str(r["stat"])
                for r in summary.get("comparisons") or summary.get("headline") or []
                if r.get("stat")
            }
        ),
        "acceptance_by_task": bool(summary.get("acceptance") or summary.get("acceptance_by_task")),
    }
    if not candidate_arm:
        return facts
    floors = {
        (r.get("load"), r.get("metric"), r.get("stat")): r.get("noise_floor")
        for r in summary.get("noise_floor") or []
    }
    rows = list(summary.get("comparisons") or summary.get("headline") or [])
    for r in rows:
        if r.get("arm") != candidate_arm:
            continue
        row = {
            k: r.get(k)
            for k in ("load", "metric", "stat", "base", "cand", "delta", "delta_lo", "delta_hi")
            + ("ratio", "ratio_lo", "ratio_hi")
        }
        row["traffic_class"] = r.get("traffic_class")
        floor = r.get("noise_floor", floors.get((r.get("load"), r.get("metric"), r.get("stat"))))
        row["noise_floor"] = floor
        facts["comparisons"].append(row)
        if row["load"] not in facts["loads"]:
            facts["loads"].append(row["load"])
    quality = summary.get("quality")
    if isinstance(quality, Mapping) and quality.get("rates"):
        slices: dict[str, dict[str, Any]] = {}
        for r in quality["rates"]:
            if r.get("arm") != candidate_arm:
                continue
            s = slices.setdefault(
                str(r.get("task")), {"slice": str(r.get("task")), "n": 0, "regressions": {}}
            )
            s["n"] += int(r.get("n_requests") or 0)
        for r in quality.get("regressions") or []:
            if r.get("arm") != candidate_arm:
                continue
            s = slices.setdefault(
                str(r.get("task")), {"slice": str(r.get("task")), "n": 0, "regressions": {}}
            )
            check = str(r.get("check"))
            s["regressions"][check] = s["regressions"].get(check, 0) + int(r.get("count", 1))
        if slices:
            facts["quality"] = {
                "exact_expected": bool(quality.get("exact_expected", False)),
                "slices": [slices[k] for k in sorted(slices)],
            }
    resources = summary.get("resources") or []
    peaks = {"baseline": [], "candidate": []}
    capacity: list[float] = []
    for r in resources:
        who = (
            "candidate" if r.get("arm") == candidate_arm else "baseline" if r.get("arm") == baseline else None
        )
        if who and _finite(r.get("peak_memory_bytes")):
            peaks[who].append(float(r["peak_memory_bytes"]))
        if _finite(r.get("capacity_bytes")):
            capacity.append(float(r["capacity_bytes"]))
    if peaks["candidate"]:
        facts["memory"] = {
            "baseline_peak_bytes": max(peaks["baseline"]) if peaks["baseline"] else None,
            "candidate_peak_bytes": max(peaks["candidate"]),
            "capacity_bytes": min(capacity) if capacity else None,
        }
    return facts


# ---------------------------------------------------------------- helpers


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _result(key: str, status: str, summary: str, numbers: list, evidence: list, notes: list | None = None):
    return {
        "key": key,
        "title": dict(CRITERIA)[key],
        "status": status,
        "summary": summary,
        "numbers": numbers,
        "evidence": evidence,
        "notes": notes or [],
    }


def _num(label: str, value: Any, unit: str = "") -> dict[str, Any]:
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    return {"label": label, "value": value, "unit": unit}


def _in_scope(load: str, settings: Mapping[str, Any]) -> bool:
    scope = settings.get("loads_in_scope") or []
    return not scope or load in scope


def _rows(
    facts: Mapping[str, Any], *, metric: str, stat: str | None, traffic_class: str | None
) -> list[dict]:
    return [
        r
        for r in facts.get("comparisons") or []
        if r.get("metric") == metric
        and (stat is None or r.get("stat") == stat)
        and r.get("traffic_class") == traffic_class
    ]


def _unit(metric: str) -> str:
    if metric.endswith("_s"):
        return "s"
    if metric.endswith("_rps"):
        return "req/s"
    if metric == "successes_per_accelerator_hour":
        return "tasks/accel-h"
    return ""


def comparison_direction(row: Mapping[str, Any]) -> str:
    """``"better"``, ``"worse"`` or ``"not distinguishable"`` for a comparison row: the interval
    must exclude zero and ``|delta|`` must exceed the noise floor (when known); ``"unknown"``
    when the numbers are missing."""
    delta, lo, hi = row.get("delta"), row.get("delta_lo"), row.get("delta_hi")
    if not (_finite(delta) and _finite(lo) and _finite(hi)):
        return "unknown"
    if lo <= 0 <= hi:
        return "not distinguishable"
    floor = row.get("noise_floor")
    if _finite(floor) and abs(delta) <= floor:
        return "not distinguishable"
    higher = row.get("metric") in HIGHER_IS_BETTER
    improved = delta > 0 if higher else delta < 0
    return "better" if improved else "worse"


# ---------------------------------------------------------------- the five criteria


def criterion_task_improvement(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(1) Workload-weighted relative improvement (ratio - 1) in successful tasks per
    accelerator-hour (or goodput when that is absent) over the loads in scope, with its lower
    bound above zero. The weighted lower bound is the weighted sum of the per-load lower bounds:
    conservative (never above the exact bound for independent loads)."""
    key = "task_improvement"
    metric = settings["improvement_metric"]
    rows = [
        r
        for r in _rows(facts, metric=metric, stat=None, traffic_class=None)
        if _in_scope(r["load"], settings)
    ]
    if not rows:
        metric = settings.get("improvement_fallback_metric") or metric
        rows = [
            r
            for r in _rows(facts, metric=metric, stat=None, traffic_class=None)
            if _in_scope(r["load"], settings)
        ]
    evidence = [{"label": "headline table", "anchor": "headline"}]
    usable = []
    for r in rows:
        ratio, lo, hi = r.get("ratio"), r.get("ratio_lo"), r.get("ratio_hi")
        if not (_finite(ratio) and _finite(lo) and _finite(hi)) and _finite(r.get("base")) and r["base"]:
            ratio = r["cand"] / r["base"] if _finite(r.get("cand")) else None
            lo = 1 + r["delta_lo"] / r["base"] if _finite(r.get("delta_lo")) else None
            hi = 1 + r["delta_hi"] / r["base"] if _finite(r.get("delta_hi")) else None
        if _finite(ratio) and _finite(lo) and _finite(hi):
            usable.append((r, float(ratio), float(lo), float(hi)))
    if not usable:
        return _result(key, NOT_MEASURED, f"no {metric} comparison for the loads in scope", [], evidence)
    weights_in = settings.get("load_weights") or {}
    weights = [float(weights_in.get(r["load"], 1.0)) for r, *_ in usable]
    total = sum(weights)
    if total <= 0:
        return _result(key, NOT_MEASURED, "load weights sum to zero", [], evidence)
    weights = [w / total for w in weights]
    est = sum(w * (ratio - 1) for w, (_, ratio, _, _) in zip(weights, usable, strict=True))
    low = sum(w * (lo - 1) for w, (_, _, lo, _) in zip(weights, usable, strict=True))
    high = sum(w * (hi - 1) for w, (_, _, _, hi) in zip(weights, usable, strict=True))
    numbers = [_num("weighted improvement", est, "fraction"), _num("lower bound", low, "fraction")]
    numbers.append(_num("upper bound", high, "fraction"))
    for w, (r, ratio, lo, hi) in zip(weights, usable, strict=True):
        numbers.append(_num(f"{r['load']}: {metric} baseline", r.get("base"), _unit(metric)))
        numbers.append(_num(f"{r['load']}: {metric} candidate", r.get("cand"), _unit(metric)))
        numbers.append(_num(f"{r['load']}: ratio [lo, hi] (weight {w:.2f})", [ratio, lo, hi], "x"))
    ok = low > 0
    summary = f"{metric}: weighted change {est:+.1%} (interval {low:+.1%} to {high:+.1%})"
    return _result(
        key, PASS if ok else FAIL, summary + ("" if ok else ": interval not above zero"), numbers, evidence
    )


def criterion_latency_benefit(
    facts: Mapping[str, Any], settings: Mapping[str, Any], *, traffic_class: str
) -> dict[str, Any]:
    """(2) For the promised class, at every load in scope, p95 TPOT or p95 e2e (seconds) is
    better than the baseline: interval below zero and |delta| beyond the A/A noise floor."""
    key = "latency_benefit"
    stat = settings["latency_stat"]
    evidence = [
        {"label": "TPOT vs load", "anchor": "tpot-vs-load"},
        {"label": "noise floor", "anchor": "noise"},
    ]
    by_load: dict[str, list[dict]] = {}
    for metric in settings["latency_metrics"]:
        for r in _rows(facts, metric=metric, stat=stat, traffic_class=traffic_class):
            if _in_scope(r["load"], settings):
                by_load.setdefault(r["load"], []).append(r)
    if not by_load:
        return _result(
            key, NOT_MEASURED, f"no {stat} latency comparison for class {traffic_class!r}", [], evidence
        )
    numbers, failing = [], []
    for load in _ordered(by_load, facts):
        verdicts = []
        for r in by_load[load]:
            v = comparison_direction(r)
            verdicts.append(v)
            numbers.append(
                _num(
                    f"{load} {traffic_class} {r['metric']} {stat}: baseline / candidate / delta [lo, hi] / floor",
                    [
                        r.get("base"),
                        r.get("cand"),
                        r.get("delta"),
                        r.get("delta_lo"),
                        r.get("delta_hi"),
                        r.get("noise_floor"),
                    ],
                    "s",
                )
            )
            numbers.append(_num(f"{load} {r['metric']} verdict", v))
        if "better" not in verdicts:
            failing.append(load)
    if failing:
        return _result(
            key,
            FAIL,
            f"no clear {stat} benefit for {traffic_class} at load {', '.join(failing)}",
            numbers,
            evidence,
        )
    return _result(
        key,
        PASS,
        f"{traffic_class} {stat} latency better beyond the noise floor at every load in scope",
        numbers,
        evidence,
    )


def criterion_quality(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(3) Per slice (task) and check, regressions / requests (a fraction) at or below the
    slice's threshold (default 0 on ``json`` and ``tool_call``). Exact-match differences count
    only when exact output is expected (greedy)."""
    key = "quality"
    evidence = [{"label": "quality regressions", "anchor": "quality"}]
    quality = facts.get("quality")
    if not quality or not quality.get("slices"):
        return _result(key, NOT_MEASURED, "no quality-equivalence results", [], evidence)
    thresholds = settings["quality_thresholds"]
    checks = list(VALIDITY_CHECKS) + (["exact_match"] if quality.get("exact_expected") else [])
    numbers, failing, total = [], [], 0
    for s in quality["slices"]:
        limit = float(thresholds.get(s["slice"], thresholds.get("*", 0.0)))
        n = int(s.get("n") or 0)
        for check in checks:
            count = int((s.get("regressions") or {}).get(check, 0))
            total += count
            rate = count / n if n else (0.0 if count == 0 else math.inf)
            numbers.append(
                _num(f"{s['slice']} {check}: regressions / requests (limit {limit:.2%})", [count, n])
            )
            if rate > limit:
                failing.append(f"{s['slice']} {check} {count}/{n}")
    notes = [] if quality.get("exact_expected") else ["exact match not required (sampled decoding)"]
    if failing:
        return _result(
            key, FAIL, "regressions above threshold: " + "; ".join(failing), numbers, evidence, notes
        )
    return _result(
        key, PASS, f"{total} regressions, all slices within their thresholds", numbers, evidence, notes
    )


def criterion_memory_headroom(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(4) Candidate peak memory (bytes) at most ``memory_fraction`` of capacity (bytes)."""
    key = "memory_headroom"
    evidence = [{"label": "memory per arm", "anchor": "memory"}]
    memory = facts.get("memory") or {}
    peak = memory.get("candidate_peak_bytes")
    capacity = settings.get("memory_capacity_bytes") or memory.get("capacity_bytes")
    fraction = float(settings["memory_fraction"])
    if not _finite(peak):
        return _result(key, NOT_MEASURED, "candidate peak memory not measured", [], evidence)
    numbers = [
        _num("candidate peak", peak, "bytes"),
        _num("baseline peak", memory.get("baseline_peak_bytes"), "bytes"),
        _num("capacity", capacity, "bytes"),
        _num("allowed fraction", fraction, "fraction"),
    ]
    if not _finite(capacity) or capacity <= 0:
        return _result(
            key, NOT_MEASURED, "memory capacity unknown (set it in the gate settings)", numbers, evidence
        )
    used = peak / capacity
    numbers.append(_num("candidate peak / capacity", used, "fraction"))
    ok = used <= fraction
    summary = f"peak {used:.1%} of capacity (limit {fraction:.0%})"
    return _result(key, PASS if ok else FAIL, summary, numbers, evidence)


def criterion_load_stability(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(5) No load level where the candidate is significantly worse (interval excludes zero in
    the bad direction, beyond the noise floor) on any stability metric; a worse load outside the
    proposal's ``loads_in_scope`` is reported but does not fail."""
    key = "load_stability"
    evidence = [
        {"label": "headline table", "anchor": "headline"},
        {"label": "TPOT vs load", "anchor": "tpot-vs-load"},
    ]
    numbers, worse_in, worse_out, seen = [], [], [], 0
    for spec in settings["stability_metrics"]:
        metric, _, stat = spec.partition(":")
        for r in _rows(facts, metric=metric, stat=stat or None, traffic_class=None):
            v = comparison_direction(r)
            if v == "unknown":
                continue
            seen += 1
            if v == "worse":
                label = f"{r['load']} {metric} {r['stat']}"
                numbers.append(
                    _num(
                        f"{label}: delta [lo, hi]",
                        [r.get("delta"), r.get("delta_lo"), r.get("delta_hi")],
                        _unit(metric),
                    )
                )
                (worse_in if _in_scope(r["load"], settings) else worse_out).append(label)
    if not seen:
        return _result(key, NOT_MEASURED, "no per-load comparison", [], evidence)
    numbers.insert(0, _num("comparisons checked", seen))
    notes = [f"worse outside the proposal's scope (allowed): {', '.join(worse_out)}"] if worse_out else []
    if worse_in:
        return _result(key, FAIL, "significantly worse at: " + ", ".join(worse_in), numbers, evidence, notes)
    return _result(
        key,
        PASS,
        "no load level in scope where the candidate is significantly worse",
        numbers,
        evidence,
        notes,
    )


def _ordered(loads: Iterable[str], facts: Mapping[str, Any]) -> list[str]:
    order = {load: i for i, load in enumerate(facts.get("loads") or [])}
    return sorted(loads, key=lambda load: (order.get(load, len(order)), str(load)))


def gate_evaluate(
    facts: Mapping[str, Any], settings: Mapping[str, Any] | None, *, traffic_class: str
) -> dict[str, Any]:
    """All five criteria and the overall verdict: ``"pass"`` (all pass), ``"fail"`` (any
    fails) or ``"incomplete"`` (none fails, some not measured)."""
    resolved = gate_settings_resolve(settings)
    criteria = [
        criterion_task_improvement(facts, resolved),
        criterion_latency_benefit(facts, resolved, traffic_class=traffic_class),
        criterion_quality(facts, resolved),
        criterion_memory_headroom(facts, resolved),
        criterion_load_stability(facts, resolved),
    ]
    statuses = {c["status"] for c in criteria}
    overall = FAIL if FAIL in statuses else PASS if statuses == {PASS} else "incomplete"
    return {
        "overall": overall,
        "criteria": criteria,
        "settings": resolved,
        "traffic_class": traffic_class,
        "candidate_arm": facts.get("candidate_arm"),
        "baseline_arm": facts.get("baseline_arm"),
    }


def gate_failing(gate: Mapping[str, Any]) -> list[str]:
    """Keys of the failing criteria of a computed gate."""
    return [c["key"] for c in gate.get("criteria") or [] if c.get("status") == FAIL]
