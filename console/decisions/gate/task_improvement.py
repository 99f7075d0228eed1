"""Criterion 1: more acceptable completed tasks per unit of accelerator time, without losing
tasks; on busy accelerator-hours, or on capacity at the SLO where a capacity search ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from console.decisions.gate.common import (
    comparison_rows,
    criterion_result,
    finite,
    load_weights_resolve,
    metric_unit,
    number_row,
    ratio_interval,
    scope_loads,
)
from console.decisions.gate.constants import (
    COST_BASES,
    DEFAULT_SETTINGS,
    EFFICIENCY_METRIC,
    FAIL,
    NOT_MEASURED,
    PASS,
)


def criterion_task_improvement(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(1) More acceptable completed tasks per unit of accelerator time, without losing tasks:
    over the loads in scope, weighted by the workload mix,

    - the success rate is **not worse** (non-inferiority): the weighted lower bound of the
      candidate's paired success-rate difference (the declared success metric) is above
      ``-success_margin`` (default 0.01, one point; a changed margin is a deviation), and
    - **successes per busy accelerator-hour** are **better**: the weighted lower bound of the
      relative change (Welch interval over the runs) is above zero.

    Where a capacity search ran (``cost_basis`` ``"capacity"``) the second part is the capacity
    ratio instead (:func:`_task_improvement_capacity`). Otherwise accelerator-hours are the
    comparison's ``cost_basis``, busy time (each run's seconds with a request in flight), never
    the replay window: below saturation the window is the trace's
    arrival span, the same for every arm, and could not show an engine doing the same work in
    less time. Weights: ``load_weights`` (gate settings), else the experiment's declared
    weights; none declared = equal weights, stated in the reason. A weighted lower bound is the weighted sum of the
    per-load lower bounds: conservative. Not measured when the comparison has no busy time, or a
    load in scope lacks either interval (no runs, fewer than two runs per arm)."""
    key = "task_improvement"
    evidence = [{"label": "headline table", "anchor": "headline"}]
    scope = scope_loads(facts, settings)
    basis = facts.get("cost_basis")
    if basis not in COST_BASES:
        return criterion_result(
            key,
            NOT_MEASURED,
            f"no busy time: the comparison's accelerator-hours are not on a known cost basis ({basis or 'none stated'}); "
            "recompute it",
            [],
            evidence,
        )
    ends = facts.get("endpoints") or {}
    s_metric, s_stat = ends.get("success_metric", "success"), ends.get("success_stat", "mean")
    margin = float(settings.get("success_margin", DEFAULT_SETTINGS["success_margin"]))
    success = {r["load"]: r for r in comparison_rows(facts, metric=s_metric, stat=s_stat, traffic_class=None)}
    efficiency = {r["load"]: r for r in comparison_rows(facts, metric=EFFICIENCY_METRIC, stat=None, traffic_class=None)}
    missing = []
    for load in scope:
        s_row, e_row = success.get(load), efficiency.get(load)
        if s_row is None or s_row.get("measured") is False or not (finite(s_row.get("delta")) and finite(s_row.get("delta_lo"))):
            missing.append(f"{load}: no {s_metric} interval" + (f" ({s_row['reason']})" if s_row and s_row.get("reason") else ""))
        if basis != "capacity" and (e_row is None or ratio_interval(e_row) is None):
            why = (e_row or {}).get("reason") or "no runs with busy time"
            missing.append(f"{load}: no {EFFICIENCY_METRIC} interval ({why})")
    if not scope or missing:
        return criterion_result(key, NOT_MEASURED, "; ".join(missing) or "no load in scope", [], evidence)
    weights, how = load_weights_resolve(scope, settings, facts)
    if not weights:
        return criterion_result(key, NOT_MEASURED, "load weights sum to zero", [], evidence)
    if basis == "capacity":
        return _task_improvement_capacity(facts, success=success, scope=scope, weights=weights, how=how, margin=margin)
    return _task_improvement_busy_time(
        facts, success=success, efficiency=efficiency, scope=scope, weights=weights, how=how, margin=margin, basis=basis
    )


def _task_improvement_busy_time(
    facts: Mapping[str, Any],
    *,
    success: Mapping[str, Mapping[str, Any]],
    efficiency: Mapping[str, Mapping[str, Any]],
    scope: Sequence[str],
    weights: Sequence[float],
    how: str,
    margin: float,
    basis: str,
) -> dict[str, Any]:
    """Criterion 1 on busy accelerator-hours: success not worse (the weighted non-inferiority of
    :func:`criterion_task_improvement`) and successes per busy accelerator-hour better, the
    weighted lower bound of their relative change (fraction) above zero. Every load in
    ``scope`` has both intervals here (the caller checked)."""
    key = "task_improvement"
    evidence = [{"label": "headline table", "anchor": "headline"}]
    s_metric = (facts.get("endpoints") or {}).get("success_metric", "success")
    ratios = [ratio_interval(efficiency[load]) for load in scope]
    s_est = sum(w * float(success[load]["delta"]) for w, load in zip(weights, scope, strict=True))
    s_low = sum(w * float(success[load]["delta_lo"]) for w, load in zip(weights, scope, strict=True))
    e_est = sum(w * (r[0] - 1) for w, r in zip(weights, ratios, strict=True) if r)
    e_low = sum(w * (r[1] - 1) for w, r in zip(weights, ratios, strict=True) if r)
    e_high = sum(w * (r[2] - 1) for w, r in zip(weights, ratios, strict=True) if r)
    numbers = [
        number_row(f"weighted {s_metric} difference", s_est, "fraction"),
        number_row(f"{s_metric} difference lower bound (must be above -margin)", s_low, "fraction"),
        number_row("success margin", margin, "fraction"),
        number_row("weighted change in successes per busy accelerator-hour", e_est, "fraction"),
        number_row("lower bound", e_low, "fraction"),
        number_row("upper bound", e_high, "fraction"),
    ]
    for w, load, r in zip(weights, scope, ratios, strict=True):
        s_row, e_row = success[load], efficiency[load]
        numbers.append(
            number_row(f"{load}: {s_metric} baseline / candidate / delta [lo, hi] (weight {w:.2f})",
                       [s_row.get("base"), s_row.get("cand"), s_row.get("delta"), s_row.get("delta_lo"), s_row.get("delta_hi")],
                       "fraction")
        )
        numbers.append(number_row(f"{load}: {EFFICIENCY_METRIC} baseline / candidate", [e_row.get("base"), e_row.get("cand")], metric_unit(EFFICIENCY_METRIC)))
        numbers.append(number_row(f"{load}: ratio [lo, hi] (weight {w:.2f})", list(r or ()), "x"))
    failing = []
    if not s_low > -margin:
        failing.append(_success_not_within_margin(s_metric, s_est=s_est, s_low=s_low, margin=margin))
    if not e_low > 0:
        failing.append("successes per busy accelerator-hour not better: interval not above zero")
    summary = (
        f"{EFFICIENCY_METRIC} (cost basis {basis}: {COST_BASES[basis]}): weighted change {e_est:+.1%} "
        f"(interval {e_low:+.1%} to {e_high:+.1%}); {s_metric} difference {s_est:+.1%} (lower bound {s_low:+.1%}, "
        f"margin {margin:.1%}); {how}"
    )
    notes = [f"cost basis: {COST_BASES[basis]}, never the replay window", f"weights: {how}"]
    if failing:
        return criterion_result(key, FAIL, summary + ": " + "; ".join(failing), numbers, evidence, notes)
    return criterion_result(key, PASS, summary, numbers, evidence, notes)


def _task_improvement_capacity(
    facts: Mapping[str, Any],
    *,
    success: Mapping[str, Mapping[str, Any]],
    scope: Sequence[str],
    weights: Sequence[float],
    how: str,
    margin: float,
) -> dict[str, Any]:
    """Criterion 1 on capacity at the SLO: success not worse (the weighted non-inferiority of
    :func:`criterion_task_improvement`) and the capacity ratio candidate / baseline above 1: the
    lower end of its interval (``comparison.capacity``: candidate low / baseline high of the
    repeats' bracket envelopes) strictly above 1, i.e. the candidate met the SLO at a rate above
    every rate at which the baseline failed it. An end a search left open is not measured, except
    a candidate that met the SLO at no tested rate while the baseline did: that fails."""
    key = "task_improvement"
    evidence = [{"label": "capacity at the SLO", "anchor": "capacity"}, {"label": "headline table", "anchor": "headline"}]
    ends = facts.get("endpoints") or {}
    s_metric = ends.get("success_metric", "success")
    cap = facts.get("capacity") or {}
    cand, base = cap.get("candidate"), cap.get("baseline")
    if not cand or not base:
        who = "candidate" if not cand else "baseline"
        return criterion_result(key, NOT_MEASURED, f"capacity search: no finished search of the {who}", [], evidence)
    ratio = cand.get("ratio")
    r_lo, r_hi = (list(cand.get("ratio_interval") or []) + [None, None])[:2]
    s_est = sum(w * float(success[load]["delta"]) for w, load in zip(weights, scope, strict=True))
    s_low = sum(w * float(success[load]["delta_lo"]) for w, load in zip(weights, scope, strict=True))
    slo = cap.get("slo") or {}
    numbers = [
        number_row(f"weighted {s_metric} difference", s_est, "fraction"),
        number_row(f"{s_metric} difference lower bound (must be above -margin)", s_low, "fraction"),
        number_row("success margin", margin, "fraction"),
        number_row("baseline capacity [interval]", [base.get("rate_multiplier"), *(base.get("interval") or [None, None])], "x trace rate"),
        number_row("candidate capacity [interval]", [cand.get("rate_multiplier"), *(cand.get("interval") or [None, None])], "x trace rate"),
        number_row("capacity ratio candidate / baseline", ratio, "x"),
        number_row("ratio interval lower end (must be above 1)", r_lo, "x"),
        number_row("ratio interval upper end", r_hi, "x"),
        number_row("repeats (baseline, candidate)", [base.get("n_repeats"), cand.get("n_repeats")]),
    ]
    for w, load in zip(weights, scope, strict=True):
        s_row = success[load]
        numbers.append(
            number_row(f"{load}: {s_metric} baseline / candidate / delta [lo, hi] (weight {w:.2f})",
                       [s_row.get("base"), s_row.get("cand"), s_row.get("delta"), s_row.get("delta_lo"), s_row.get("delta_hi")],
                       "fraction")
        )
    slo_text = ", ".join(f"{k} {v}" for k, v in slo.items())
    notes = [f"cost basis: {COST_BASES['capacity']}", f"SLO: {slo_text}", f"weights: {how}"]
    failing = []
    if not s_low > -margin:
        failing.append(_success_not_within_margin(s_metric, s_est=s_est, s_low=s_low, margin=margin))
    if not finite(r_lo):
        if (cand.get("interval") or [None])[0] is None and base.get("rate_multiplier") is not None:
            failing.append("the candidate met the SLO at no tested rate, the baseline did")
        else:
            why = "the baseline met the SLO at every tested rate: raise the bracket's hi" if (base.get("interval") or [None, None])[1] is None else "a search found no passing rate"
            return criterion_result(key, NOT_MEASURED, f"capacity ratio interval open ({why})", numbers, evidence, notes)
    elif not r_lo > 1:
        failing.append(f"capacity not better: ratio interval lower end {r_lo:.3g} not above 1")
    summary = (
        f"capacity at the SLO ({slo_text}): candidate / baseline {ratio if ratio is None else f'{ratio:.3g}'}x "
        f"(interval {r_lo if not finite(r_lo) else f'{r_lo:.3g}'} to {r_hi if not finite(r_hi) else f'{r_hi:.3g}'}); "
        f"{s_metric} difference {s_est:+.1%} (lower bound {s_low:+.1%}, margin {margin:.1%}); {how}"
    )
    if failing:
        return criterion_result(key, FAIL, summary + ": " + "; ".join(failing), numbers, evidence, notes)
    return criterion_result(key, PASS, summary, numbers, evidence, notes)


def _success_not_within_margin(s_metric: str, *, s_est: float, s_low: float, margin: float) -> str:
    """Why non-inferiority failed, in words that fit the point estimate: "worse beyond the margin"
    only when the estimate itself is; else that a loss beyond the margin cannot be ruled out."""
    if s_est <= -margin:
        return f"{s_metric} worse beyond the margin ({s_est:+.1%}, lower bound {s_low:+.1%}, margin -{margin:.1%})"
    return (
        f"{s_metric} not shown within the margin: estimate {s_est:+.1%}, but its lower bound {s_low:+.1%} "
        f"is below -{margin:.1%} (too uncertain to rule out a loss)"
    )
