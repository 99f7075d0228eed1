"""What a draft decision computes rather than is told: its gate result and its checklist.

Every write to a draft (create, edit, submit) calls :func:`decision_recompute`, so the gate and
the prefilled checklist always match the evidence and the settings the draft holds now.
"""

from __future__ import annotations

from console.analysis.comparison.schema import ComparisonSchemaError, Summary
from console.analysis.selectors import experiment_fit_assessment
from console.decisions import checklist, gate, selectors
from console.decisions.models import Decision
from console.jsonutil import json_safe


def decision_recompute(*, decision: Decision, comparison: Summary | None) -> None:
    """Refresh the computed parts of a draft in place (the caller saves it): the gate (facts from
    ``comparison`` when given, else the stored facts, re-evaluated with the current settings) and
    the checklist (prefilled from the evidence, the user's answers kept)."""
    arm = decision.candidate_arm
    label = arm.label if arm else None
    keep_off = decision.proposal == Decision.Proposal.KEEP_OFF
    stored = (decision.gate or {}).get("facts") or {}
    if comparison is None and keep_off and "candidates" not in stored:
        # a keep-off draft whose facts predate its proposal: its gate judges every candidate, so it
        # reads the comparison; one stored in another schema leaves the gate not measured
        try:
            comparison = selectors.decision_comparison(experiment=decision.experiment)
        except ComparisonSchemaError:
            comparison = None
    if comparison is not None:
        hardware = decision.experiment.runs.exclude(hardware={}).values_list("hardware", flat=True)
        exact = decision.experiment.sampling == "greedy"
        capacity = gate.memory_capacity_from_hardware(list(hardware))
        if keep_off:
            facts = gate.gate_facts_keep_off(
                comparison, traffic_class=decision.traffic_class, exact_expected=exact, capacity_bytes=capacity
            )
        else:
            facts = gate.gate_facts_from_summary(
                comparison, candidate_arm=label, traffic_class=decision.traffic_class, exact_expected=exact,
                capacity_bytes=capacity,
            )
        # run until decided: criterion 2 reads the primary endpoint at the looks' adjusted level
        gate.gate_sequential_attach(facts, until_decided=decision.experiment.until_decided, comparison_key=comparison.key)
        decision.comparison_key = comparison.key[:64]
    else:
        facts = stored
        if facts.get("candidate_arm") != label or ("candidates" in facts) != keep_off:
            facts = gate.gate_facts_from_summary(
                None, candidate_arm=label, traffic_class=decision.traffic_class
            )
    result = gate.gate_evaluate(
        facts,
        decision.gate_settings,
        traffic_class=decision.traffic_class,
        proposal=decision.proposal,
        policy=decision.policy if isinstance(decision.policy, dict) else None,
    )
    result["facts"] = facts
    decision.gate = json_safe(result)
    evidence = selectors.decision_evidence(experiment=decision.experiment, candidate_arm=arm, facts=facts)
    evidence["rollback"] = selectors.decision_rollback(decision=decision)
    evidence["fit"] = experiment_fit_assessment(experiment=decision.experiment)
    decision.checklist = checklist.checklist_merge(
        checklist.checklist_prefill(evidence), decision.checklist_answers or {}
    )
