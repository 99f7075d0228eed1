"""The gate as a whole: every criterion for the proposal, and the overall verdict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.decisions.gate.common import no_evidence_refusal, not_speculating_refusal
from console.decisions.gate.constants import FAIL, PASS, POLICY_CRITERION
from console.decisions.gate.keep_off import criterion_keep_off
from console.decisions.gate.latency import criterion_latency_benefit
from console.decisions.gate.memory import criterion_memory_headroom
from console.decisions.gate.policy_holdout import criterion_policy_holdout
from console.decisions.gate.quality import criterion_quality
from console.decisions.gate.settings import gate_settings_deviations, gate_settings_resolve
from console.decisions.gate.stability import criterion_load_stability
from console.decisions.gate.task_improvement import criterion_task_improvement


def gate_evaluate(
    facts: Mapping[str, Any],
    settings: Mapping[str, Any] | None,
    *,
    traffic_class: str,
    proposal: str = "enable_everywhere",
    policy: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """All criteria and the overall verdict: ``"pass"`` (all pass), ``"fail"`` (any fails) or
    ``"incomplete"`` (none fails, some not measured). For ``enable_for_slice`` the policy's
    holdout evaluation replaces criteria 1 and 2 (the candidate everywhere is not what ships);
    ``keep_off`` is judged by its own criterion alone (``keep_off``: no candidate shows a clear
    benefit that keeping speculation off would forgo)."""
    resolved = gate_settings_resolve(settings)
    if proposal == "keep_off":
        # judged as that choice: quality, memory and stability guard enabling, not keeping off
        criteria = [criterion_keep_off(facts, resolved, traffic_class=traffic_class)]
    else:
        criteria = [
            *_benefit_criteria(facts, resolved, traffic_class=traffic_class, proposal=proposal, policy=policy),
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
        "deviations": gate_settings_deviations(settings),
        "traffic_class": traffic_class,
        "proposal": proposal,
        "candidate_arm": facts.get("candidate_arm"),
        "baseline_arm": facts.get("baseline_arm"),
    }


def _benefit_criteria(
    facts: Mapping[str, Any],
    resolved: Mapping[str, Any],
    *,
    traffic_class: str,
    proposal: str,
    policy: Mapping[str, Any] | None,
) -> list[dict[str, Any]]:
    """Criteria 1 and 2, or for a slice policy its holdout evaluation in their place."""
    if proposal == "enable_for_slice":
        refusal = not_speculating_refusal(facts) or no_evidence_refusal(facts, resolved)
        if refusal:
            return [refusal | {"key": POLICY_CRITERION[0], "title": POLICY_CRITERION[1]}]
        return [criterion_policy_holdout(policy)]
    return [
        criterion_task_improvement(facts, resolved),
        criterion_latency_benefit(facts, resolved, traffic_class=traffic_class),
    ]


def gate_not_passing(gate: Mapping[str, Any]) -> list[str]:
    """Keys of every criterion that did not pass (failing or not measured)."""
    return [c["key"] for c in gate.get("criteria") or [] if c.get("status") != PASS]
