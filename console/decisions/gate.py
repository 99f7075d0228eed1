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
- ``headline``: the baseline's and candidate's headline point estimates per load
  (``HEADLINE_FIELDS``, units as named), frozen into the evidence; ``acceptance_rate_min``: the
  candidate's lowest acceptance rate over loads (fraction; the rollback plan's default trigger).
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
from typing import Any, TypeGuard

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
        "success",
        "met_deadline",
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
    "improvement_fallback_metric": "success",
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
        "success:mean",
        "met_deadline:mean",
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


SLICE_METRICS: tuple[str, ...] = ("tpot_s", "e2e_s", "ttft_s", "success")
# Headline point estimates frozen into a decision's evidence (baseline and candidate, per load).
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
    "accepted_per_pass",
    "cost_per_success_usd",
    "cost_per_million_output_tokens_usd",
    "peak_memory_bytes",
    "n_regressions",
)
SLICE_STATS: tuple[str, ...] = ("mean", "p50", "p95", "p99")


def gate_facts_from_summary(
    summary: Mapping[str, Any] | None,
    *,
    candidate_arm: str | None,
    traffic_class: str,
    exact_expected: bool = False,
    capacity_bytes: float | None = None,
) -> dict[str, Any]:
    """Facts for candidate ``candidate_arm`` from a ``console.analysis`` comparison summary
    (``comparison_compute``, schema version 1). The one function that knows that schema.

    - overall rows: ``headline[arm, load].deltas`` (paired, bootstrap intervals, noise floor);
    - ``successes_per_accelerator_hour`` per load from the ``runs`` rows (successes /
      accelerator_hours per run; Welch t interval on the difference of the per-run means when
      both arms have at least two runs; the ratio interval divides it by the baseline mean);
    - promised-class rows: the ``slices`` rows with ``dimension == "traffic_class"``:
      ``<metric>_<stat>_delta`` (and ``_lo``/``_hi`` where the summary has intervals), with the
      all-request noise floor of that load; where the class holds every request at a load, the
      headline rows stand for it (they carry p95 intervals);
    - quality: request counts per task from the ``task`` slices, regressions per task and check
      from ``quality.regressions`` (``checks`` is a comma-separated list); exact-output
      differences per task (``n_exact_match`` x (1 - ``exact_match_rate``)) when
      ``exact_expected``;
    - memory: ``peak_memory_bytes`` of the headline (max over loads), ``capacity_bytes`` given.
    """
    summary = summary or {}
    baseline = summary.get("baseline_arm")
    headline = [h for h in summary.get("headline") or [] if isinstance(h, Mapping)]
    loads = list(summary.get("load_order") or [])
    for h in headline:
        if h.get("load") not in loads:
            loads.append(h.get("load"))
    stats: set[str] = set()
    for h in headline:
        stats |= {str(d.get("stat")) for d in h.get("deltas") or []}
        stats |= {k.rsplit("_", 1)[1] for k in h if k.startswith(("e2e_s_p", "tpot_s_p", "ttft_s_p"))}
    acceptance = summary.get("acceptance") or {}
    facts: dict[str, Any] = {
        "baseline_arm": baseline,
        "candidate_arm": candidate_arm,
        "loads": loads,
        "comparisons": [],
        "quality": None,
        "memory": None,
        "stats_reported": sorted(stats),
        "acceptance_by_task": bool(acceptance.get("by_task")) if isinstance(acceptance, Mapping) else False,
        "notes": [],
        "headline": [],
        "acceptance_rate_min": None,
    }
    if not candidate_arm:
        return facts
    floors = {
        (r.get("load"), r.get("metric"), r.get("stat")): r.get("noise_floor")
        for r in summary.get("noise_floor") or []
    }
    comparisons: list[dict[str, Any]] = facts["comparisons"]
    n_by_load: dict[str, int] = {}
    for h in headline:
        if h.get("arm") != candidate_arm:
            continue
        n_by_load[h["load"]] = int(h.get("n_requests") or 0)
        for d in h.get("deltas") or []:
            comparisons.append(_fact_row(d, load=h["load"], traffic_class=None))
    comparisons += _per_run_rows(
        summary.get("runs") or [], candidate_arm=candidate_arm, baseline_arm=baseline
    )
    for r in summary.get("slices") or []:
        if (
            r.get("arm") != candidate_arm
            or r.get("dimension") != "traffic_class"
            or r.get("value") != traffic_class
        ):
            continue
        load = r.get("load")
        if n_by_load.get(load) and int(r.get("n_requests") or 0) == n_by_load[load]:
            comparisons += [
                dict(c, traffic_class=traffic_class)
                for c in comparisons
                if c["load"] == load
                and c["traffic_class"] is None
                and c["metric"] != "successes_per_accelerator_hour"
            ]
            continue
        for m in SLICE_METRICS:
            for st in SLICE_STATS:
                delta = r.get(f"{m}_{st}_delta")
                if not _finite(delta):
                    continue
                cand = r.get(f"{m}_{st}")
                base = cand - delta if _finite(cand) else None
                row = {
                    "load": load,
                    "metric": m,
                    "stat": st,
                    "base": base,
                    "cand": cand,
                    "delta": delta,
                    "delta_lo": r.get(f"{m}_{st}_delta_lo"),
                    "delta_hi": r.get(f"{m}_{st}_delta_hi"),
                }
                row |= _ratio_from_delta(row)
                row["noise_floor"] = floors.get((load, m, st))
                row["traffic_class"] = traffic_class
                comparisons.append(row)
    facts["quality"] = _quality_facts(summary, candidate_arm=candidate_arm, exact_expected=exact_expected)
    facts["headline"] = [
        {"arm": h.get("arm"), "load": h.get("load")} | {k: h.get(k) for k in HEADLINE_FIELDS}
        for h in headline
        if h.get("arm") in (candidate_arm, baseline)
    ]
    rates = [
        float(h["acceptance_rate"])
        for h in headline
        if h.get("arm") == candidate_arm and _finite(h.get("acceptance_rate"))
    ]
    facts["acceptance_rate_min"] = min(rates) if rates else None
    peaks: dict[str, list[float]] = {"baseline": [], "candidate": []}
    for h in headline:
        who = (
            "candidate" if h.get("arm") == candidate_arm else "baseline" if h.get("arm") == baseline else None
        )
        if who and _finite(h.get("peak_memory_bytes")):
            peaks[who].append(float(h["peak_memory_bytes"]))
    if peaks["candidate"]:
        facts["memory"] = {
            "baseline_peak_bytes": max(peaks["baseline"]) if peaks["baseline"] else None,
            "candidate_peak_bytes": max(peaks["candidate"]),
            "capacity_bytes": capacity_bytes,
        }
    return facts


def _fact_row(d: Mapping[str, Any], *, load: str, traffic_class: str | None) -> dict[str, Any]:
    keys = (
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
    )
    row = {k: d.get(k) for k in keys}
    row |= {"load": load, "traffic_class": traffic_class, "noise_floor": d.get("noise_floor")}
    return row


def _ratio_from_delta(row: Mapping[str, Any]) -> dict[str, Any]:
    base = row.get("base")
    if not (_finite(base) and base):
        return {"ratio": None, "ratio_lo": None, "ratio_hi": None}
    return {
        k: (1 + row[src] / base if _finite(row.get(src)) else None)
        for k, src in (("ratio", "delta"), ("ratio_lo", "delta_lo"), ("ratio_hi", "delta_hi"))
    }


def _per_run_rows(
    runs: Iterable[Mapping[str, Any]], *, candidate_arm: str, baseline_arm: str | None
) -> list[dict]:
    """``successes_per_accelerator_hour`` (successful requests per accelerator-hour) per load."""
    from scipy import stats as sps

    values: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        hours, ok = r.get("accelerator_hours"), r.get("successes")
        if r.get("arm") not in (candidate_arm, baseline_arm) or not (
            _finite(hours) and hours > 0 and _finite(ok)
        ):
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
        row |= _ratio_from_delta(row)
        rows.append(row)
    return rows


def _quality_facts(
    summary: Mapping[str, Any], *, candidate_arm: str, exact_expected: bool
) -> dict[str, Any] | None:
    quality = summary.get("quality") or {}
    slices: dict[str, dict[str, Any]] = {}
    for r in summary.get("slices") or []:
        if r.get("arm") != candidate_arm or r.get("dimension") != "task":
            continue
        s = slices.setdefault(str(r.get("value")), {"slice": str(r.get("value")), "n": 0, "regressions": {}})
        s["n"] += int(r.get("n_requests") or 0)
        if exact_expected and _finite(r.get("exact_match_rate")) and r.get("n_exact_match"):
            diff = round(int(r["n_exact_match"]) * (1 - float(r["exact_match_rate"])))
            s["regressions"]["exact_match"] = s["regressions"].get("exact_match", 0) + diff
    for r in quality.get("regressions") or []:
        if r.get("arm") != candidate_arm:
            continue
        s = slices.setdefault(str(r.get("task")), {"slice": str(r.get("task")), "n": 0, "regressions": {}})
        for check in str(r.get("checks") or r.get("check") or "").split(","):
            if check:
                s["regressions"][check] = s["regressions"].get(check, 0) + 1
    if not slices:
        return None
    return {
        "exact_expected": exact_expected,
        "truncated": bool(quality.get("truncated")),
        "slices": [slices[k] for k in sorted(slices)],
    }


def memory_capacity_from_hardware(hardware: Iterable[Mapping[str, Any]]) -> float | None:
    """Memory capacity in bytes from run hardware records (``workers.hardware``): the smallest
    GPU's memory on GPU hosts (the summary's peak is GPU memory there), else host memory."""
    gpu, host = [], []
    for hw in hardware:
        for g in hw.get("gpus") or []:
            if _finite(g.get("memory_bytes")):
                gpu.append(float(g["memory_bytes"]))
        if _finite(hw.get("memory_bytes")):
            host.append(float(hw["memory_bytes"]))
    if gpu:
        return min(gpu)
    return min(host) if host else None


# ---------------------------------------------------------------- helpers


def _finite(x: Any) -> TypeGuard[float]:
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
    if metric in ("success", "met_deadline"):
        return "fraction"
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


def _with_interval(r: Mapping[str, Any]) -> tuple[float, float, float] | None:
    ratio, lo, hi = r.get("ratio"), r.get("ratio_lo"), r.get("ratio_hi")
    if not (_finite(ratio) and _finite(lo) and _finite(hi)) and _finite(r.get("base")) and r["base"]:
        derived = _ratio_from_delta(r)
        ratio, lo, hi = derived["ratio"], derived["ratio_lo"], derived["ratio_hi"]
    if _finite(ratio) and _finite(lo) and _finite(hi):
        return float(ratio), float(lo), float(hi)
    return None


def criterion_task_improvement(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(1) Workload-weighted relative improvement (ratio - 1) in acceptable completed tasks over
    the loads in scope, with its lower bound above zero.

    The metric is ``improvement_metric`` (successful requests per accelerator-hour) when every
    load in scope has an interval for it, else ``improvement_fallback_metric`` (``success``: the
    paired fraction of requests that finished, within deadline, with valid output). The weighted
    lower bound is the weighted sum of the per-load lower bounds: conservative (never above the
    exact bound for independent loads)."""
    key = "task_improvement"
    evidence = [{"label": "headline table", "anchor": "headline"}]
    notes: list[str] = []
    usable: list[tuple[dict, float, float, float]] = []
    metric = settings["improvement_metric"]
    for i, name in enumerate([settings["improvement_metric"], settings.get("improvement_fallback_metric")]):
        if not name:
            continue
        rows = [
            r
            for r in _rows(facts, metric=name, stat=None, traffic_class=None)
            if _in_scope(r["load"], settings)
        ]
        judged = [(r, _with_interval(r)) for r in rows]
        if rows and all(v is not None for _, v in judged):
            usable = [(r, *v) for r, v in judged if v is not None]
            metric = name
            if i:
                notes.append(
                    f"{settings['improvement_metric']} has no interval at every load in scope "
                    f"(fewer than two runs per arm): judged on {name}"
                )
            break
    if not usable:
        return _result(
            key, NOT_MEASURED, f"no {metric} comparison with an interval for the loads in scope", [], evidence
        )
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
        numbers.append(
            _num(f"{r['load']}: {metric} baseline / candidate", [r.get("base"), r.get("cand")], _unit(metric))
        )
        numbers.append(_num(f"{r['load']}: ratio [lo, hi] (weight {w:.2f})", [ratio, lo, hi], "x"))
    ok = low > 0
    summary = f"{metric}: weighted change {est:+.1%} (interval {low:+.1%} to {high:+.1%})"
    return _result(
        key,
        PASS if ok else FAIL,
        summary + ("" if ok else ": interval not above zero"),
        numbers,
        evidence,
        notes,
    )


def criterion_latency_benefit(
    facts: Mapping[str, Any], settings: Mapping[str, Any], *, traffic_class: str
) -> dict[str, Any]:
    """(2) For the promised class, at every load in scope, p95 TPOT or p95 e2e (seconds) is
    better than the baseline: interval below zero and |delta| beyond the A/A noise floor.

    Where the comparison has no p95 interval for the class at a load (a class that is only part
    of the traffic), the class's mean TPOT/e2e intervals decide, with a note saying so."""
    key = "latency_benefit"
    stat = settings["latency_stat"]
    evidence = [
        {"label": "TPOT vs load", "anchor": "tpot-vs-load"},
        {"label": "noise floor", "anchor": "noise"},
    ]
    by_load: dict[str, list[dict]] = {}
    fallback: dict[str, list[dict]] = {}
    for metric in settings["latency_metrics"]:
        for r in _rows(facts, metric=metric, stat=None, traffic_class=traffic_class):
            if not _in_scope(r["load"], settings):
                continue
            if r["stat"] == stat:
                by_load.setdefault(r["load"], []).append(r)
            elif r["stat"] == "mean":
                fallback.setdefault(r["load"], []).append(r)
    notes = []
    for load in set(by_load) | set(fallback):
        if not any(comparison_direction(r) != "unknown" for r in by_load.get(load, [])) and fallback.get(
            load
        ):
            by_load[load] = by_load.get(load, []) + fallback[load]
            notes.append(f"{load}: no {stat} interval for {traffic_class}; judged on mean intervals")
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
                    f"{load} {traffic_class} {r['metric']} {r['stat']}: baseline / candidate / delta [lo, hi] / floor ({v})",
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
        if "better" not in verdicts:
            failing.append(load)
    if failing:
        return _result(
            key,
            FAIL,
            f"no clear latency benefit for {traffic_class} at load {', '.join(failing)}",
            numbers,
            evidence,
            sorted(notes),
        )
    return _result(
        key,
        PASS,
        f"{traffic_class} latency better beyond the noise floor at every load in scope",
        numbers,
        evidence,
        sorted(notes),
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
        counts = {check: int((s.get("regressions") or {}).get(check, 0)) for check in checks}
        total += sum(counts.values())
        numbers.append(
            _num(
                f"{s['slice']}: regressions / requests (limit {limit:.2%} per check)",
                [sum(counts.values()), n],
            )
        )
        for check, count in counts.items():
            rate = count / n if n else (0.0 if count == 0 else math.inf)
            if count:
                numbers.append(_num(f"{s['slice']} {check}: regressions / requests", [count, n]))
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
    numbers: list[dict[str, Any]] = []
    worse_in: list[str] = []
    worse_out: list[str] = []
    seen = 0
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
