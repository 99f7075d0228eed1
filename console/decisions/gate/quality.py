"""Criterion 3: no regression in critical quality, from complete counts per task and check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scipy.stats import binomtest

from console.decisions.gate.common import criterion_result, finite, load_in_scope, number_row
from console.decisions.gate.constants import FAIL, NOT_MEASURED, PASS


def criterion_quality(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(3) From complete counts, per task and check over the loads in scope: the regression
    rate (baseline valid, candidate not) is at most the task's threshold plus the baseline's own
    flip rate between repeats, and the candidate is not significantly worse by McNemar's exact
    test (regressions > improvements at p < 0.05). Exact match counts only when exact output is
    expected (greedy). Graded correctness (check ``correct``) is one more check, under the same
    thresholds. Not measured when no request was checkable."""
    key = "quality"
    evidence = [{"label": "quality regressions", "anchor": "quality"}]
    quality = facts.get("quality") or {}
    checks = [c for c in quality.get("checks") or [] if load_in_scope(c.get("load"), settings)]
    if not checks or sum(int(c.get("n") or 0) for c in checks) == 0:
        return criterion_result(key, NOT_MEASURED, "no request had an applicable quality check", [], evidence)
    thresholds = settings["quality_thresholds"]
    grouped: dict[tuple[str, str], dict[str, Any]] = {}
    for c in checks:
        g = grouped.setdefault((c["slice"], c["check"]), {"n": 0, "regressions": 0, "improvements": 0, "flips": []})
        g["n"] += int(c.get("n") or 0)
        g["regressions"] += int(c.get("regressions") or 0)
        g["improvements"] += int(c.get("improvements") or 0)
        if finite(c.get("baseline_flip_rate")):
            g["flips"].append(float(c["baseline_flip_rate"]))
    numbers, failing = [], []
    total_reg = total_imp = 0
    for (task, check), g in sorted(grouped.items()):
        if g["n"] == 0:
            continue
        limit = float(thresholds.get(task, thresholds.get("*", 0.0)))
        flip = max(g["flips"]) if g["flips"] else 0.0
        rate = g["regressions"] / g["n"]
        p = _mcnemar(g["regressions"], g["improvements"])
        total_reg += g["regressions"]
        total_imp += g["improvements"]
        numbers.append(
            number_row(
                f"{task} {check}: regressions / improvements / checked (limit {limit:.2%} + baseline flips {flip:.2%})",
                [g["regressions"], g["improvements"], g["n"]],
            )
        )
        if rate > limit + flip:
            failing.append(f"{task} {check} {g['regressions']}/{g['n']}")
        elif p is not None and p < 0.05 and g["regressions"] > g["improvements"]:
            failing.append(f"{task} {check}: significantly more regressions than improvements (McNemar p {p:.3g})")
    notes = [] if quality.get("exact_expected") else ["exact match not required (sampled decoding)"]
    if failing:
        return criterion_result(key, FAIL, "regressions above threshold: " + "; ".join(failing), numbers, evidence, notes)
    return criterion_result(
        key, PASS, f"{total_reg} regressions, {total_imp} improvements, all tasks within their thresholds", numbers, evidence, notes
    )


def _mcnemar(regressions: int, improvements: int) -> float | None:
    n = regressions + improvements
    return float(binomtest(regressions, n, 0.5).pvalue) if n else None
