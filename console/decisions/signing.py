"""Signing a submitted decision: N of M approvals.

A decision needs ``Decision.approvals_needed`` approvals (approved, or approved with conditions)
from distinct approvers of its team, none of whom drafted, edited or submitted it. Each signature is
one append-only ``SignOff`` row and one audit event. An approval below the count leaves the decision
``submitted`` (an ``approval`` event: "approval 1 of 2"); the approval that completes the count
signs it, approved with conditions when any approval carried conditions, and a rejection by any
eligible approver signs it rejected at once. Signing freezes the decision, appends it to the
archive chain with every signature in the bundle and notifies ``decision.signed``.

Concurrency: the decision row is locked (``SELECT ... FOR UPDATE`` on PostgreSQL, the immediate
write transaction on SQLite) and the signatures are counted again under the lock, so approvers
signing at once never make more signatures than needed, lose one, or archive twice: whoever comes
after the last one is told who signed (``Conflict``).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from console.accounts import roles, teams
from console.accounts.services import user_role
from console.decisions import gate, notifications, selectors
from console.decisions.archiving import archive_record_append
from console.decisions.audit import DecisionError, audit_event_write, permission_require
from console.decisions.gate.constants import TITLES
from console.decisions.limits import decision_text_problems
from console.decisions.models import AuditEvent, Decision, SignOff
from console.errors import Conflict

SIGN_VERDICTS = (Decision.Status.APPROVED, Decision.Status.REJECTED, Decision.Status.APPROVED_WITH_CONDITIONS)
APPROVING = (Decision.Status.APPROVED, Decision.Status.APPROVED_WITH_CONDITIONS)


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


def final_verdict(signatures: list[SignOff], *, needed: int) -> str | None:
    """The status ``signatures`` (in order) give a decision needing ``needed`` approvals: rejected
    on any rejection, approved (with conditions when any approval carried them) once ``needed``
    distinct approvals are in, None while it waits for more."""
    if any(s.verdict == Decision.Status.REJECTED for s in signatures):
        return Decision.Status.REJECTED
    approvals = [s for s in signatures if s.verdict in APPROVING]
    if len(approvals) < needed:
        return None
    if any(s.verdict == Decision.Status.APPROVED_WITH_CONDITIONS for s in approvals):
        return Decision.Status.APPROVED_WITH_CONDITIONS
    return Decision.Status.APPROVED


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
    """Record ``signer``'s signature on a submitted decision (approve, reject, approve with
    conditions); the one that completes the count (or a rejection) signs, archives and notifies.
    Returns the decision as it is now (still ``submitted`` after an approval below the count).

    Only an approver of its team may sign, never one who drafted, edited or submitted it (separation
    of duties, from the audit trail: ``PermissionDenied``); the same approver signs once
    (``DecisionError``); the comment is required, conditions too when approving with conditions, an
    override reason on every approval over a failing gate criterion. After the last signature:
    ``Conflict`` naming who signed."""
    permission_require(signer, roles.SIGN_DECISION, experiment=decision.experiment)
    decision = Decision.objects.select_for_update().select_related("created_by").get(pk=decision.pk)
    if decision.is_signed:
        raise Conflict(_signed_already(decision))
    if decision.status != Decision.Status.SUBMITTED:
        raise DecisionError(f"decision #{decision.pk} is {decision.status}: submit it before signing")
    refusal = selectors.decision_sign_refusal(decision=decision, user=signer)
    if refusal:
        raise PermissionDenied(refusal)
    # Counted under the row lock: every earlier signature has committed or waits behind us.
    earlier = list(SignOff.objects.filter(decision=decision).order_by("signed_at", "id"))
    mine = next((s for s in earlier if s.signer_id == signer.pk), None)
    if mine is not None:
        raise DecisionError(
            f"you already signed decision #{decision.pk} ({mine.verdict} at {selectors.iso_utc(mine.signed_at)}): "
            "another approver must add the next signature"
        )
    failing = _signoff_checked(
        decision=decision,
        verdict=verdict,
        comment=comment,
        conditions=conditions,
        override_reason=override_reason,
    )
    try:
        with transaction.atomic():
            signature = SignOff.objects.create(
                decision=decision,
                signer=signer,
                signer_username=signer.get_username(),
                signer_role=user_role(signer, team_id=teams.team_id_of(decision)) or "",
                verdict=verdict,
                comment=comment.strip(),
                conditions=conditions.strip(),
                override_reason=override_reason.strip() if failing else "",
                signed_at=timezone.now(),
            )
    except IntegrityError:
        # Only reachable if the lock above was bypassed: (decision, signer) is unique.
        raise Conflict(_signed_already(decision)) from None
    needed = decision.approvals_needed
    signatures = [*earlier, signature]
    count = sum(1 for s in signatures if s.verdict in APPROVING)
    details = {"verdict": verdict, "overridden": failing, "approvals": count, "required": needed}
    status = final_verdict(signatures, needed=needed)
    if status is None:
        audit_event_write(
            decision=decision,
            action=AuditEvent.Action.APPROVAL,
            actor=signer,
            details=details | {"label": f"approval {count} of {needed}"},
        )
        return decision
    return _decision_seal(decision=decision, signer=signer, status=status, details=details)


def _decision_seal(*, decision: Decision, signer: Any, status: str, details: dict[str, Any]) -> Decision:
    """The last signature: the decision takes ``status``, is archived with every signature and the
    signed notification goes out (on commit)."""
    decision.status = status
    decision.save()
    label = (
        f"approval {details['approvals']} of {details['required']}"
        if status != Decision.Status.REJECTED
        else "rejection"
    )
    audit_event_write(
        decision=decision,
        action=AuditEvent.Action.SIGNED,
        actor=signer,
        details=details | {"status": status, "label": label},
    )
    decision = (
        Decision.objects.select_related("candidate_arm__config", "created_by")
        .prefetch_related("signoffs")
        .get(pk=decision.pk)
    )
    record = archive_record_append(decision=decision)
    if decision.supersedes_id and status != Decision.Status.REJECTED:
        audit_event_write(
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
    signatures = list(SignOff.objects.filter(decision_id=decision.pk).order_by("signed_at", "id"))
    who = ""
    if signatures:
        names = [s.signer_username for s in signatures]
        joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        who = f" by {joined} at {selectors.iso_utc(signatures[-1].signed_at)}"
    return f"decision #{decision.pk} was already signed{who}: your sign-off was not recorded"
