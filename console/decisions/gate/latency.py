"""Criterion 2: a clear latency benefit for the promised class, beyond the noise floor and
Holm-adjusted, with no guard metric worse."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.decisions.gate.common import (
    baseline_unstable,
    comparison_direction,
    comparison_rows,
    criterion_result,
    finite,
    no_evidence_refusal,
    not_speculating_refusal,
    number_row,
    scope_loads,
)
from console.decisions.gate.constants import FAIL, NOT_MEASURED, PASS, TITLES
from console.decisions.gate.sequential import sequential_primary


def criterion_latency_benefit(facts: Mapping[str, Any], settings: Mapping[str, Any], *, traffic_class: str) -> dict[str, Any]:
    """(2) The experiment's declared primary latency metric (default p95 TPOT) of the promised
    class is better at every load in scope: measured, Holm-adjusted p-value below alpha (over
    every candidate arm x load), interval below zero and ``|delta|`` beyond the A/A noise
    floor; and no guard metric of that class (``guard_latency_metrics``: TTFT and e2e p95 by
    default) is worse beyond the floor. Not measured without a floor, with an unstable
    baseline, at a load in scope without data, or when the class has too few requests. Fails on
    a candidate that did not speculate, drafted against its config or ran on other hardware or
    software than the baseline (``not_speculating_refusal``); not measured when it left no
    evidence that it drafted at a load in scope (``no_evidence_refusal``)."""
    key = "latency_benefit"
    evidence = [{"label": "primary endpoints", "anchor": "primary"}, {"label": "noise floor", "anchor": "noise"}]
    ends = facts.get("endpoints") or {}
    metric, stat = ends.get("primary_metric", "tpot_s"), ends.get("primary_stat", "p95")
    alpha = float(ends.get("alpha", 0.05))
    promised = ends.get("promised_class")
    if promised and promised != traffic_class:
        return criterion_result(
            key,
            NOT_MEASURED,
            f"the experiment declared {promised!r} as its promised class before it ran; this decision names {traffic_class!r}",
            [],
            evidence,
        )
    refusal = not_speculating_refusal(facts) or no_evidence_refusal(facts, settings)
    if refusal:
        return refusal | {"key": key, "title": TITLES[key]}
    if not facts.get("has_noise_floor"):
        return criterion_result(key, NOT_MEASURED, "no noise floor: the baseline needs at least two repeats", [], evidence)
    unstable = baseline_unstable(facts)
    if unstable:
        return criterion_result(key, NOT_MEASURED, unstable, [], evidence)
    scope = scope_loads(facts, settings)
    numbers: list[dict[str, Any]] = []
    failing, missing = [], []
    for load in scope:
        primary = [r for r in comparison_rows(facts, metric=metric, stat=stat, traffic_class=traffic_class) if r["load"] == load]
        if not primary:
            missing.append(f"{load}: no {traffic_class} requests")
            continue
        r, note = sequential_primary(facts, primary[0])  # an experiment run until decided: its adjusted level
        v = comparison_direction(r)
        numbers.append(
            number_row(
                f"{load} {traffic_class} {metric} {stat} (primary{note}): baseline / candidate / delta [lo, hi] / floor ({v})",
                [r.get("base"), r.get("cand"), r.get("delta"), r.get("delta_lo"), r.get("delta_hi"), r.get("noise_floor")],
                "s",
            )
        )
        numbers.append(number_row(f"{load} {traffic_class} {metric} {stat}: Holm-adjusted p", r.get("p_holm")))
        if v == "not measured":
            missing.append(f"{load}: {r.get('reason') or 'not measured'}")
            continue
        p_holm = r.get("p_holm")
        if v != "better" or not finite(p_holm) or p_holm >= alpha:
            failing.append(f"{load}: primary {v}" + (f", Holm p {p_holm:.3g}" if finite(p_holm) else ""))
        g_numbers, g_failing, g_missing = _latency_guards(facts, settings, load=load, traffic_class=traffic_class)
        numbers += g_numbers
        failing += g_failing
        missing += g_missing
    if failing:
        return criterion_result(key, FAIL, f"no clear latency benefit for {traffic_class}: " + "; ".join(failing), numbers, evidence, missing)
    if missing or not scope:
        return criterion_result(key, NOT_MEASURED, "; ".join(missing) or "no load in scope", numbers, evidence)
    return criterion_result(
        key,
        PASS,
        f"{traffic_class} {metric} {stat} better beyond the noise floor at every load in scope (Holm-adjusted), no guard worse",
        numbers,
        evidence,
    )


def _latency_guards(
    facts: Mapping[str, Any], settings: Mapping[str, Any], *, load: str, traffic_class: str
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The guard metrics (``guard_latency_metrics``) of ``traffic_class`` at one load:
    ``(numbers, failing, missing)``, failing where one is worse beyond the noise floor."""
    numbers: list[dict[str, Any]] = []
    failing, missing = [], []
    for guard in settings.get("guard_latency_metrics") or []:
        g_metric, _, g_stat = guard.partition(":")
        rows = [g for g in comparison_rows(facts, metric=g_metric, stat=g_stat, traffic_class=traffic_class) if g["load"] == load]
        if not rows:
            missing.append(f"{load}: guard {guard} has no comparison")
            continue
        gv = comparison_direction(rows[0])
        numbers.append(
            number_row(
                f"{load} {traffic_class} {guard} (guard): delta [lo, hi] / floor ({gv})",
                [rows[0].get("delta"), rows[0].get("delta_lo"), rows[0].get("delta_hi"), rows[0].get("noise_floor")],
                "s",
            )
        )
        if gv == "worse":
            failing.append(f"{load}: {guard} worse beyond the floor")
        elif gv == "not measured":
            missing.append(f"{load}: guard {guard} {rows[0].get('reason') or 'not measured'}")
    return numbers, failing, missing
