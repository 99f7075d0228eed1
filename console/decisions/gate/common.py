"""What every criterion shares: the result and number rows it returns, the loads in scope, the
comparison rows it reads and their direction against the noise floor, ratio intervals, the
workload weights, and the refusals of a candidate the comparison cannot vouch for (it did not
speculate, drafted against its config, ran on other hardware or software than the baseline, or
left no evidence that it drafted)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from console.decisions.gate.constants import FAIL, HIGHER_IS_BETTER, NOT_MEASURED, TITLES


def finite(x: Any) -> TypeGuard[float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def ratio_from_delta(row: Mapping[str, Any]) -> dict[str, Any]:
    base = row.get("base")
    if not (finite(base) and base):
        return {"ratio": None, "ratio_lo": None, "ratio_hi": None}
    # ratios of non-negative quantities: a bound below 0 is clamped there (see ratio_interval)
    return {
        k: (max(1 + row[src] / base, 0.0) if finite(row.get(src)) else None)
        for k, src in (("ratio", "delta"), ("ratio_lo", "delta_lo"), ("ratio_hi", "delta_hi"))
    }


def criterion_result(key: str, status: str, summary: str, numbers: list, evidence: list, notes: list | None = None):
    return {
        "key": key,
        "title": TITLES[key],
        "status": status,
        "summary": summary,
        "numbers": numbers,
        "evidence": evidence,
        "notes": notes or [],
    }


def number_row(label: str, value: Any, unit: str = "") -> dict[str, Any]:
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    return {"label": label, "value": value, "unit": unit}


def load_in_scope(load: str, settings: Mapping[str, Any]) -> bool:
    scope = settings.get("loads_in_scope") or []
    return not scope or load in scope


def scope_loads(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> list[str]:
    return list(settings.get("loads_in_scope") or []) or list(facts.get("loads") or [])


def comparison_rows(facts: Mapping[str, Any], *, metric: str, stat: str | None, traffic_class: str | None) -> list[dict]:
    return [
        r
        for r in facts.get("comparisons") or []
        if r.get("metric") == metric
        and (stat is None or r.get("stat") == stat)
        and r.get("traffic_class") == traffic_class
    ]


def metric_unit(metric: str) -> str:
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
    """``"better"``, ``"worse"``, ``"not distinguishable"`` or ``"not measured"`` for a
    comparison row: measured, the interval excludes zero and ``|delta|`` exceeds a known noise
    floor. Without a floor a row is ``"not measured"`` here: the gate needs the margin."""
    delta, lo, hi = row.get("delta"), row.get("delta_lo"), row.get("delta_hi")
    if row.get("measured") is False or not (finite(delta) and finite(lo) and finite(hi)):
        return "not measured"
    if lo <= 0 <= hi:
        return "not distinguishable"
    floor = row.get("noise_floor")
    if not finite(floor):
        return "not measured"
    if abs(delta) <= floor:
        return "not distinguishable"
    higher = row.get("metric") in HIGHER_IS_BETTER
    improved = delta > 0 if higher else delta < 0
    return "better" if improved else "worse"


def baseline_unstable(facts: Mapping[str, Any]) -> str | None:
    stability = facts.get("baseline_stability") or {}
    if stability.get("stable") is False:
        return stability.get("message") or "baseline unstable: rerun on a quieter host"
    return None


def ratio_interval(r: Mapping[str, Any]) -> tuple[float, float, float] | None:
    if r.get("measured") is False:
        return None
    ratio, lo, hi = r.get("ratio"), r.get("ratio_lo"), r.get("ratio_hi")
    if not (finite(ratio) and finite(lo) and finite(hi)) and finite(r.get("base")) and r["base"]:
        derived = ratio_from_delta(r)
        ratio, lo, hi = derived["ratio"], derived["ratio_lo"], derived["ratio_hi"]
    if finite(ratio) and finite(lo) and finite(hi):
        # A ratio of non-negative quantities (successes per accelerator-hour, latencies) is never
        # below 0: a wider interval's bound below it is clamped, so no change reads below -100%
        # and the true value stays covered.
        return float(ratio), max(float(lo), 0.0), max(float(hi), 0.0)
    return None


def load_weights_resolve(
    loads: Sequence[str], settings: Mapping[str, Any], facts: Mapping[str, Any] | None = None
) -> tuple[list[float], str]:
    """Normalised weights for ``loads`` from the declared workload mix and how they were chosen,
    for the reason: never silently equal. The decision's ``load_weights`` setting wins; else the
    weights the experiment declared on its load levels (``facts["load_weights"]``)."""
    declared = settings.get("load_weights") or {}
    source = "gate settings"
    if not declared:
        declared = (facts or {}).get("load_weights") or {}
        source = "the experiment's load levels"
    if not declared:
        how = "equal weights (none declared)"
    else:
        unset = [load for load in loads if load not in declared]
        how = f"declared workload weights ({source})" + (f"; {', '.join(unset)} unset: weight 1" if unset else "")
    raw = [float(declared.get(load, 1.0)) for load in loads]
    total = sum(raw)
    return ([w / total for w in raw] if total > 0 else []), how


def not_speculating_refusal(facts: Mapping[str, Any]) -> dict[str, Any] | None:
    """A failing result when the candidate, configured to speculate, drafted nothing (server
    counters or per-request metrics say so): what it measured is the baseline again, so no
    benefit it shows can be speculative decoding's. Likewise when its drafts (or the baseline's)
    contradict the arm's config (``config_mismatch``), or when the two arms' runs differ in
    hardware, driver or versions (``environment_mismatch``): the difference measured is not the
    configs'."""
    speculation = [str(r) for key in ("not_speculating", "config_mismatch") for r in facts.get(key) or []]
    environment = [str(r) for r in facts.get("environment_mismatch") or []]
    if not speculation and not environment:
        return None
    evidence = [{"label": "speculation check", "anchor": "speculation"}] if speculation else []
    evidence += [{"label": "environment check", "anchor": "environment"}] if environment else []
    return criterion_result("latency_benefit", FAIL, "; ".join([*speculation, *environment]), [], evidence)


def no_evidence_refusal(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """A not-measured result when the candidate, configured to speculate, left no evidence that
    it drafted at a load in scope (no per-request steps, no server counters): nothing says the
    speculative config ran at all, so its benefit cannot be credited to it (never a pass)."""
    reasons = [
        str(r.get("reason"))
        for r in facts.get("no_speculation_evidence") or []
        if load_in_scope(str(r.get("load")), settings)
    ]
    if not reasons:
        return None
    evidence = [{"label": "speculation check", "anchor": "speculation"}]
    return criterion_result("latency_benefit", NOT_MEASURED, "; ".join(reasons), [], evidence)
