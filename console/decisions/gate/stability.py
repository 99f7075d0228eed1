"""Criterion 5: stable across load levels: no load in scope where the candidate is significantly
worse beyond the noise floor on a stability metric."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.decisions.gate.common import (
    baseline_unstable,
    comparison_direction,
    comparison_rows,
    criterion_result,
    metric_unit,
    number_row,
    scope_loads,
)
from console.decisions.gate.constants import FAIL, NOT_MEASURED, PASS


def criterion_load_stability(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(5) Across at least two load levels in scope, each with measured comparisons and a noise
    floor: no load where the candidate is significantly worse beyond the floor on any stability
    metric. A worse load outside ``loads_in_scope`` is reported but does not fail. Not measured
    with one load level, without a floor, or with an unstable baseline."""
    key = "load_stability"
    evidence = [{"label": "headline table", "anchor": "headline"}, {"label": "TPOT vs load", "anchor": "tpot-vs-load"}]
    scope = scope_loads(facts, settings)
    if len(scope) < 2:
        return criterion_result(key, NOT_MEASURED, f"{len(scope)} load level in scope: nothing to compare across loads", [], evidence)
    if not facts.get("has_noise_floor"):
        return criterion_result(key, NOT_MEASURED, "no noise floor: the baseline needs at least two repeats", [], evidence)
    unstable = baseline_unstable(facts)
    if unstable:
        return criterion_result(key, NOT_MEASURED, unstable, [], evidence)
    numbers: list[dict[str, Any]] = []
    worse_in: list[str] = []
    worse_out: list[str] = []
    measured_loads: set[str] = set()
    for spec in settings["stability_metrics"]:
        metric, _, stat = spec.partition(":")
        for r in comparison_rows(facts, metric=metric, stat=stat or None, traffic_class=None):
            v = comparison_direction(r)
            if v == "not measured":
                continue
            measured_loads.add(r["load"])
            if v == "worse":
                label = f"{r['load']} {metric} {r['stat']}"
                numbers.append(number_row(f"{label}: delta [lo, hi] / floor", [r.get("delta"), r.get("delta_lo"), r.get("delta_hi"), r.get("noise_floor")], metric_unit(metric)))
                (worse_in if r["load"] in scope else worse_out).append(label)
    notes = [f"worse outside the proposal's scope (allowed): {', '.join(worse_out)}"] if worse_out else []
    if worse_in:
        return criterion_result(key, FAIL, "significantly worse at: " + ", ".join(worse_in), numbers, evidence, notes)
    unmeasured = [load for load in scope if load not in measured_loads]
    if unmeasured:
        return criterion_result(key, NOT_MEASURED, f"no measured comparison at load {', '.join(unmeasured)}", numbers, evidence, notes)
    numbers.insert(0, number_row("loads compared", len(scope)))
    return criterion_result(key, PASS, "no load level in scope where the candidate is significantly worse", numbers, evidence, notes)
