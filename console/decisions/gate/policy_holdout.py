"""Criteria 1 and 2 for ``enable_for_slice``: the slice policy judged on the holdout traffic it
was not fitted on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.decisions.gate.common import criterion_result, finite, number_row
from console.decisions.gate.constants import FAIL, NOT_MEASURED, PASS


def criterion_policy_holdout(policy: Mapping[str, Any] | None) -> dict[str, Any]:
    """(1+2 for ``enable_for_slice``) The chosen slice policy, judged on the holdout split it was
    not fitted on: its realized benefit (seconds per request over the holdout traffic: the
    workload-weighted gain) has an interval above zero, no overfitting flag (policy or rule), no
    quality regression and no lost successes under the policy there."""
    key = "policy_holdout"
    evidence = [{"label": "slice policy", "anchor": "policy"}]
    holdout = (policy or {}).get("holdout") or {}
    score = holdout.get("policy") or {}
    if not policy or not holdout.get("n_requests") or not finite(score.get("lo")):
        return criterion_result(key, NOT_MEASURED, "no holdout evaluation of a slice policy", [], evidence)
    flags = (policy.get("overfitting") or {})
    numbers = [
        number_row("holdout requests", holdout.get("n_requests")),
        number_row("share of holdout traffic on", holdout.get("share_on"), "fraction"),
        number_row("holdout benefit [lo, hi]", [score.get("benefit"), score.get("lo"), score.get("hi")], "s"),
        number_row("lost successes / regressions", [holdout.get("lost_successes"), holdout.get("regressions")]),
    ]
    failing = []
    if not score["lo"] > 0:
        failing.append("holdout benefit interval not above zero")
    if flags.get("policy") or flags.get("rules"):
        failing.append("overfitting: " + "; ".join(flags.get("reasons") or ["flagged"]))
    if (holdout.get("regressions") or 0) > 0:
        failing.append(f"{holdout['regressions']} quality regressions on holdout")
    if finite(holdout.get("lost_successes")) and holdout["lost_successes"] > 0:
        failing.append(f"{holdout['lost_successes']:.0f} successes lost on holdout")
    if failing:
        return criterion_result(key, FAIL, "; ".join(failing), numbers, evidence)
    return criterion_result(key, PASS, f"holdout benefit {score['benefit']:.4g} s per request, interval above zero", numbers, evidence)
