"""Writes: draft, edit, submit, record exports. Every state change writes an audit event with who
and when. What a draft computes is in ``decisions.recompute``, the rollback plan it starts with in
``decisions.rollback``; signing (each approver's signature, the last one archiving) is
``decisions.signing``, the archive append ``decisions.archiving``.

Errors: ``DecisionError`` (an invalid request: a message a user can act on), ``FrozenDecisionError``
(signed: it cannot change), ``PermissionDenied`` (role in the experiment's team, or separation of
duties), ``console.errors.Conflict`` (someone else signed first).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.accounts import roles
from console.analysis.comparison.schema import Summary
from console.decisions import checklist, gate, notifications, selectors
from console.decisions.audit import DecisionError, audit_event_write, permission_require
from console.decisions.evidence import config_export, experiment_baseline_arm
from console.decisions.limits import APPROVALS_MAX, APPROVALS_MIN, decision_text_problems
from console.decisions.models import AuditEvent, Decision, FrozenDecisionError
from console.decisions.recompute import decision_recompute
from console.decisions.rollback import DEFAULT_ROLLBACK_STEPS, default_rollback_triggers

# Signing moved to decisions.signing; these names stay here for callers of services.decision_sign.
from console.decisions.signing import SIGN_VERDICTS, decision_sign, override_required
from console.decisions.triggers import TriggerError, triggers_check
from console.decisions.words import checklist_words
from console.experiments.models import Arm, Experiment
from console.traces.models import TRAFFIC_CLASSES

__all__ = [
    "SIGN_VERDICTS",
    "DecisionError",
    "decision_create",
    "decision_export_record",
    "decision_sign",
    "decision_submit",
    "decision_submit_problems",
    "decision_update",
    "override_required",
]

EDITABLE_FIELDS = (
    "title",
    "proposal",
    "candidate_arm",
    "traffic_class",
    "rationale",
    "policy",
    "policy_ref",
    "gate_settings",
    "checklist_answers",
    "rollback_triggers",
    "rollback_revert_config",
    "rollback_steps",
    "rollback_owner",
    "rollback_verification",
    "approvals_required",
)
# What a null in ``changes`` means for each field that has a "nothing" (the API's PATCH declares
# exactly these nullable); a title, a proposal and a traffic class always have a value.
CLEARED_BY_NULL: dict[str, Any] = {
    "rationale": "",
    "policy": None,
    "policy_ref": "",
    "gate_settings": {},
    "checklist_answers": {},
    "rollback_triggers": [],
    "rollback_revert_config": {},
    "rollback_steps": "",
    "rollback_owner": "",
    "rollback_verification": "",
    "approvals_required": None,  # the deployment's number
}


def _validate_arm(experiment: Experiment, proposal: str, arm: Arm | None) -> None:
    if arm is not None and arm.experiment_id != experiment.pk:
        raise DecisionError("the candidate arm belongs to another experiment")
    if arm is not None and arm.is_baseline:
        raise DecisionError("the candidate cannot be the baseline arm")
    if proposal in (Decision.Proposal.ENABLE, Decision.Proposal.ENABLE_FOR_SLICE) and arm is None:
        raise DecisionError("a proposal to enable speculation names its candidate config")


def _validate_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Shapes of the JSON-valued fields (the API passes them straight through); the changes with
    every trigger written out in full (``triggers.trigger_full``)."""
    try:
        given = changes.get("rollback_triggers")
        triggers = {} if given is None else {"rollback_triggers": triggers_check(given)}
    except TriggerError as exc:
        raise DecisionError(str(exc)) from None
    answers = changes.get("checklist_answers", {})
    if not isinstance(answers, dict) or not all(
        isinstance(v, dict) and v.get("answer") in (None, "", checklist.YES, checklist.NO)
        for v in answers.values()
    ):
        raise DecisionError('checklist_answers: {key: {"answer": "yes" | "no", "note": text}}')
    for key in ("gate_settings", "rollback_revert_config"):
        if key in changes and not isinstance(changes[key], dict):
            raise DecisionError(f"{key}: a JSON object")
    texts = ("title", "rationale", "policy_ref", "rollback_steps", "rollback_owner", "rollback_verification")
    for key in texts:
        if key in changes and not isinstance(changes[key], str):
            raise DecisionError(f"{key}: text")
    if "proposal" in changes and changes["proposal"] not in Decision.Proposal.values:
        raise DecisionError(f"unknown proposal {changes['proposal']!r}")
    if "traffic_class" in changes:
        _traffic_class_check(changes["traffic_class"])
    if "approvals_required" in changes:
        approvals_required_check(changes["approvals_required"])
    if problems := decision_text_problems(changes):
        raise DecisionError("; ".join(problems))
    return {**changes, **triggers}


def approvals_required_check(value: Any) -> None:
    """A decision's own number of approvals: None (the deployment's) or an integer in 1..10."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not APPROVALS_MIN <= value <= APPROVALS_MAX:
        raise DecisionError(
            f"approvals_required: a whole number from {APPROVALS_MIN} to {APPROVALS_MAX}, or empty for the "
            f"deployment's ({settings.SPECREVIEW_APPROVALS_REQUIRED}); got {str(value)[:40]!r}"
        )


def _traffic_class_check(value: Any) -> None:
    """The one check of a decision's traffic class (the form offers the same choices)."""
    if value not in TRAFFIC_CLASSES:
        raise DecisionError(f"traffic_class: one of {', '.join(TRAFFIC_CLASSES)}, got {str(value)[:40]!r}")


def _gate_settings_checked(
    settings_in: Mapping[str, Any] | None, *, experiment: Experiment
) -> dict[str, Any]:
    """Gate settings as typed, validated against the gate's rules and the experiment's loads."""
    loads = [str(lv.get("label")) for lv in experiment.load_levels or []]
    try:
        return gate.gate_settings_validate(dict(settings_in or {}), loads=loads)
    except gate.GateSettingsError as exc:
        raise DecisionError("gate_settings: " + "; ".join(exc.errors)) from None


@transaction.atomic
def decision_create(
    *,
    experiment: Experiment,
    author: Any,
    title: str,
    proposal: str,
    candidate_arm: Arm | None,
    traffic_class: str,
    rationale: str = "",
    policy: dict | None = None,
    policy_ref: str = "",
    gate_settings: dict | None = None,
    supersedes: Decision | None = None,
    comparison: Summary | None = None,
    approvals_required: int | None = None,
) -> Decision:
    """Draft a decision from ``experiment``; the gate is computed from ``comparison`` (the
    analysis summary; None = not measured yet) and the rollback plan pre-filled with the
    baseline's config and triggers from the evidence."""
    permission_require(author, roles.DRAFT_DECISION, experiment=experiment)
    if proposal not in Decision.Proposal.values:
        raise DecisionError(f"unknown proposal {proposal!r}")
    _traffic_class_check(traffic_class)
    _validate_arm(experiment, proposal, candidate_arm)
    if problems := decision_text_problems({"title": title, "rationale": rationale, "policy_ref": policy_ref}):
        raise DecisionError("; ".join(problems))
    approvals_required_check(approvals_required)
    if supersedes is not None and not supersedes.is_signed:
        raise DecisionError("only a signed decision can be superseded")
    baseline = experiment_baseline_arm(experiment=experiment)
    decision = Decision(
        title=title.strip() or f"Decision on {experiment.name}"[:200],
        experiment=experiment,
        proposal=proposal,
        candidate_arm=candidate_arm,
        traffic_class=traffic_class,
        rationale=rationale,
        policy=policy,
        policy_ref=policy_ref,
        gate_settings=_gate_settings_checked(gate_settings, experiment=experiment),
        supersedes=supersedes,
        approvals_required=approvals_required,
        created_by=author,
        rollback_revert_config=config_export(baseline.config) if baseline else {},
        rollback_steps=DEFAULT_ROLLBACK_STEPS,
    )
    decision_recompute(decision=decision, comparison=comparison)
    decision.rollback_triggers = default_rollback_triggers(
        facts=decision.gate.get("facts") or {}, traffic_class=traffic_class
    )
    decision_recompute(decision=decision, comparison=None)
    decision.save()
    audit_event_write(
        decision=decision,
        action=AuditEvent.Action.CREATED,
        actor=author,
        details={"proposal": proposal, "supersedes": supersedes.pk if supersedes else None},
    )
    return decision


@transaction.atomic
def decision_update(
    *, decision: Decision, actor: Any, changes: Mapping[str, Any], comparison: Summary | None = None
) -> Decision:
    """Edit a draft (fields in ``EDITABLE_FIELDS``); recomputes the gate and checklist."""
    permission_require(actor, roles.DRAFT_DECISION, experiment=decision.experiment)
    decision = Decision.objects.select_for_update().get(pk=decision.pk)
    if decision.is_signed:
        raise FrozenDecisionError(f"decision #{decision.pk} is signed and archived: it cannot be edited")
    if decision.status != Decision.Status.DRAFT:
        raise DecisionError(f"decision #{decision.pk} is {decision.status}: only a draft can be edited")
    unknown = set(changes) - set(EDITABLE_FIELDS)
    if unknown:
        raise DecisionError(f"not editable: {', '.join(sorted(unknown))}")
    changes = {k: CLEARED_BY_NULL[k] if v is None and k in CLEARED_BY_NULL else v for k, v in changes.items()}
    changes = _validate_changes(changes)
    if "gate_settings" in changes:
        changes = {
            **changes,
            "gate_settings": _gate_settings_checked(changes["gate_settings"], experiment=decision.experiment),
        }
    changed = []
    for field, value in changes.items():
        if getattr(decision, field) != value:
            setattr(decision, field, value)
            changed.append(field)
    _validate_arm(decision.experiment, decision.proposal, decision.candidate_arm)
    decision_recompute(decision=decision, comparison=comparison)
    decision.save()
    audit_event_write(
        decision=decision, action=AuditEvent.Action.EDITED, actor=actor, details={"fields": sorted(changed)}
    )
    return decision


def decision_submit_problems(*, decision: Decision) -> list[str]:
    """What stops ``decision`` from being submitted (empty when ready)."""
    problems = []
    if not decision.rationale.strip():
        problems.append("write the rationale")
    if decision.proposal == Decision.Proposal.ENABLE_FOR_SLICE and not (
        decision.policy or decision.policy_ref
    ):
        problems.append("name the slice policy")
    unanswered = checklist.checklist_unanswered(decision.checklist or [])
    if unanswered:
        problems.append(
            "answer the checklist: " + ", ".join(f"“{checklist_words(key)}”" for key in unanswered)
        )
    missing = checklist.rollback_complete(selectors.decision_rollback(decision=decision))
    if missing:
        problems.append("complete the rollback plan: " + ", ".join(missing))
    return problems


@transaction.atomic
def decision_submit(*, decision: Decision, actor: Any) -> Decision:
    """draft -> submitted, once the rationale, checklist and rollback plan are complete."""
    permission_require(actor, roles.DRAFT_DECISION, experiment=decision.experiment)
    decision = Decision.objects.select_for_update().get(pk=decision.pk)
    if decision.status != Decision.Status.DRAFT:
        raise DecisionError(f"decision #{decision.pk} is {decision.status}: only a draft can be submitted")
    decision_recompute(decision=decision, comparison=None)
    problems = decision_submit_problems(decision=decision)
    if problems:
        raise DecisionError("; ".join(problems))
    decision.status = Decision.Status.SUBMITTED
    decision.submitted_at = timezone.now()
    # Fixed now: a later change of the deployment's setting does not move a decision in flight.
    decision.approvals_required = decision.approvals_required or settings.SPECREVIEW_APPROVALS_REQUIRED
    decision.save()
    audit_event_write(
        decision=decision,
        action=AuditEvent.Action.SUBMITTED,
        actor=actor,
        details={"approvals_required": decision.approvals_required},
    )
    notifications.notify(event="decision.submitted", decision=decision)
    return decision


def decision_export_record(*, decision: Decision, actor: Any, fmt: str) -> AuditEvent:
    """Record that ``actor`` exported ``decision`` as ``fmt`` (markdown, pdf, bundle)."""
    return audit_event_write(
        decision=decision, action=AuditEvent.Action.EXPORTED, actor=actor, details={"format": fmt}
    )
