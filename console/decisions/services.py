"""Writes: draft, edit, submit, sign (and archive), record exports. Every state change writes an
audit event with who and when. What a draft computes is in ``decisions.recompute``, the rollback
plan it starts with in ``decisions.rollback``, the archive append in ``decisions.archiving``.

Errors: ``DecisionError`` (an invalid request: a message a user can act on), ``FrozenDecisionError``
(signed: it cannot change), ``PermissionDenied`` (role in the experiment's team, or separation of
duties), ``console.errors.Conflict`` (someone else signed first).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from console.accounts import roles, teams
from console.accounts.services import user_role
from console.analysis.comparison.schema import Summary
from console.decisions import checklist, gate, notifications, selectors
from console.decisions.archiving import archive_record_append
from console.decisions.gate.constants import TITLES
from console.decisions.limits import decision_text_problems
from console.decisions.models import AuditEvent, Decision, FrozenDecisionError, SignOff
from console.decisions.recompute import decision_recompute
from console.decisions.rollback import DEFAULT_ROLLBACK_STEPS, default_rollback_triggers
from console.decisions.triggers import TriggerError, triggers_check
from console.decisions.words import checklist_words
from console.errors import Conflict
from console.experiments.models import Arm, Experiment
from console.jsonutil import json_safe
from console.traces.models import TRAFFIC_CLASSES

SIGN_VERDICTS = (Decision.Status.APPROVED, Decision.Status.REJECTED, Decision.Status.APPROVED_WITH_CONDITIONS)
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
}


class DecisionError(ValueError):
    """An invalid request about a decision; the message says what to fix."""


def _audit(*, decision: Decision, action: str, actor: Any, details: Mapping[str, Any] | None = None) -> AuditEvent:
    return AuditEvent.objects.create(
        decision=decision,
        action=action,
        actor=actor,
        actor_role=user_role(actor, team_id=teams.team_id_of(decision)) or "",
        at=timezone.now(),
        details=json_safe(dict(details or {})),
    )


def _require(user: Any, perm: str, *, experiment: Experiment) -> None:
    """PermissionDenied unless ``user`` holds ``perm`` in the team owning ``experiment`` (and so the decision)."""
    if not teams.can(user, perm, team_id=teams.team_id_of(experiment)):
        raise PermissionDenied(f"needs permission {perm} in the experiment's team")


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
    if problems := decision_text_problems(changes):
        raise DecisionError("; ".join(problems))
    return {**changes, **triggers}


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
) -> Decision:
    """Draft a decision from ``experiment``; the gate is computed from ``comparison`` (the
    analysis summary; None = not measured yet) and the rollback plan pre-filled with the
    baseline's config and triggers from the evidence."""
    _require(author, roles.DRAFT_DECISION, experiment=experiment)
    if proposal not in Decision.Proposal.values:
        raise DecisionError(f"unknown proposal {proposal!r}")
    _traffic_class_check(traffic_class)
    _validate_arm(experiment, proposal, candidate_arm)
    if problems := decision_text_problems({"title": title, "rationale": rationale, "policy_ref": policy_ref}):
        raise DecisionError("; ".join(problems))
    if supersedes is not None and not supersedes.is_signed:
        raise DecisionError("only a signed decision can be superseded")
    baseline = selectors.experiment_baseline_arm(experiment=experiment)
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
        created_by=author,
        rollback_revert_config=selectors.config_export(baseline.config) if baseline else {},
        rollback_steps=DEFAULT_ROLLBACK_STEPS,
    )
    decision_recompute(decision=decision, comparison=comparison)
    decision.rollback_triggers = default_rollback_triggers(
        facts=decision.gate.get("facts") or {}, traffic_class=traffic_class
    )
    decision_recompute(decision=decision, comparison=None)
    decision.save()
    _audit(
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
    _require(actor, roles.DRAFT_DECISION, experiment=decision.experiment)
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
    _audit(
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
    _require(actor, roles.DRAFT_DECISION, experiment=decision.experiment)
    decision = Decision.objects.select_for_update().get(pk=decision.pk)
    if decision.status != Decision.Status.DRAFT:
        raise DecisionError(f"decision #{decision.pk} is {decision.status}: only a draft can be submitted")
    decision_recompute(decision=decision, comparison=None)
    problems = decision_submit_problems(decision=decision)
    if problems:
        raise DecisionError("; ".join(problems))
    decision.status = Decision.Status.SUBMITTED
    decision.submitted_at = timezone.now()
    decision.save()
    _audit(decision=decision, action=AuditEvent.Action.SUBMITTED, actor=actor)
    notifications.notify(event="decision.submitted", decision=decision)
    return decision


def override_required(*, decision: Decision, verdict: str) -> list[str]:
    """Gate criteria that an approval of ``decision`` must override: every criterion that did not
    pass, failing or not measured, whatever the proposal (keeping speculation off is judged as
    that choice); none for a rejection. A gate that was never computed needs an override too."""
    if verdict == Decision.Status.REJECTED:
        return []
    computed = decision.gate or {}
    if not computed.get("criteria"):
        return ["gate not computed"]
    return gate.gate_not_passing(computed)


@transaction.atomic
def decision_sign(
    *,
    decision: Decision,
    signer: Any,
    verdict: str,
    comment: str,
    conditions: str = "",
    override_reason: str = "",
) -> Decision:
    """Sign a submitted decision (approve, reject, approve with conditions), freeze it, append it
    to the archive chain and notify (``decisions.notifications``).

    Only an approver of its team may sign, never one who drafted, edited or submitted it (separation
    of duties, from the audit trail: ``PermissionDenied``); the comment is required, conditions too
    when approving with conditions, an override reason when approving over a failing gate
    criterion. Two approvers at once: the row lock (PostgreSQL) or the immediate write
    transaction (SQLite) lets one through; the other gets ``Conflict``."""
    _require(signer, roles.SIGN_DECISION, experiment=decision.experiment)
    decision = Decision.objects.select_for_update().select_related("created_by").get(pk=decision.pk)
    if decision.is_signed:
        raise Conflict(_signed_already(decision))
    if decision.status != Decision.Status.SUBMITTED:
        raise DecisionError(f"decision #{decision.pk} is {decision.status}: submit it before signing")
    refusal = selectors.decision_sign_refusal(decision=decision, user=signer)
    if refusal:
        raise PermissionDenied(refusal)
    failing = _signoff_checked(
        decision=decision,
        verdict=verdict,
        comment=comment,
        conditions=conditions,
        override_reason=override_reason,
    )
    now = timezone.now()
    try:
        with transaction.atomic():
            SignOff.objects.create(
                decision=decision,
                signer=signer,
                signer_username=signer.get_username(),
                signer_role=user_role(signer, team_id=teams.team_id_of(decision)) or "",
                verdict=verdict,
                comment=comment.strip(),
                conditions=conditions.strip(),
                override_reason=override_reason.strip() if failing else "",
                signed_at=now,
            )
    except IntegrityError:
        # Only reachable if the lock above was bypassed: the one-to-one still refuses a second.
        raise Conflict(_signed_already(decision)) from None
    decision.status = verdict
    decision.save()
    _audit(
        decision=decision,
        action=AuditEvent.Action.SIGNED,
        actor=signer,
        details={"verdict": verdict, "overridden": failing},
    )
    decision = Decision.objects.select_related("candidate_arm__config", "created_by", "signoff__signer").get(
        pk=decision.pk
    )
    record = archive_record_append(decision=decision)
    if decision.supersedes_id and verdict != Decision.Status.REJECTED:
        _audit(
            decision=decision.supersedes,  # type: ignore[arg-type]
            action=AuditEvent.Action.SUPERSEDED,
            actor=signer,
            details={"by_decision": decision.pk, "by_record_sha256": record.record_sha256},
        )
    notifications.notify(event="decision.signed", decision=decision)
    return decision


def _signoff_checked(
    *, decision: Decision, verdict: str, comment: str, conditions: str, override_reason: str
) -> list[str]:
    """The gate criteria this sign-off overrides (see :func:`override_required`), once the verdict
    and the texts are valid for it; ``DecisionError`` naming what to fix otherwise."""
    if verdict not in SIGN_VERDICTS:
        raise DecisionError(f"verdict must be one of {', '.join(SIGN_VERDICTS)}")
    if not comment.strip():
        raise DecisionError("a sign-off needs a comment")
    texts = {"comment": comment, "conditions": conditions, "override_reason": override_reason}
    if problems := decision_text_problems(texts):
        raise DecisionError("; ".join(problems))
    if verdict == Decision.Status.APPROVED_WITH_CONDITIONS and not conditions.strip():
        raise DecisionError("approving with conditions needs the conditions")
    failing = override_required(decision=decision, verdict=verdict)
    if failing and not override_reason.strip():
        raise DecisionError(
            "the gate does not pass ("
            + "; ".join(TITLES.get(k, k) for k in failing)
            + "): approving needs an override reason"
        )
    return failing


def _signed_already(decision: Decision) -> str:
    signoff = SignOff.objects.filter(decision_id=decision.pk).first()
    who = f" by {signoff.signer_username} at {selectors.iso_utc(signoff.signed_at)}" if signoff else ""
    return f"decision #{decision.pk} was already signed{who}: your sign-off was not recorded"


def decision_export_record(*, decision: Decision, actor: Any, fmt: str) -> AuditEvent:
    """Record that ``actor`` exported ``decision`` as ``fmt`` (markdown, pdf, bundle)."""
    return _audit(decision=decision, action=AuditEvent.Action.EXPORTED, actor=actor, details={"format": fmt})
