"""Writes of a guarded rollout: start it, pause, resume, stop, record the rollback; the periodic
look at its triggers is in ``rollouts.evaluation``.

Who may: whoever may draft decisions in the decision's team (``accounts.draft_decision`` there:
its engineers and approvers); a viewer watches. States (``Rollout.State``)::

    running <-> paused            (an operator)
    running  -> breached          (a trigger's sequential test: "rollback recommended")
    active   -> rolled_back       (an operator says the fleet is back on the revert config)
    active   -> stopped           (an operator ends it early)
    running  -> completed         (every stage ran its duration without a breach)

A rollout's end (rolled back, stopped, completed) is appended to the decisions' hash chain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from console.accounts import teams
from console.accounts.roles import DRAFT_DECISION
from console.decisions.archiving import archive_record_append
from console.decisions.models import Decision
from console.decisions.triggers import trigger_evaluable, trigger_full
from console.jsonutil import json_safe
from console.rollouts.models import Rollout, RolloutEvent
from console.rollouts.notifications import notify
from console.rollouts.prometheus import pool_selector_check
from console.rollouts.selectors import rollout_bundle

MAX_STAGES = 20
MAX_STAGE_MINUTES = 7 * 24 * 60
REASON_MAX_CHARS = 2000
MIN_ALPHA = 0.0001  # below it the test needs looks no rollout takes (and 1/alpha may overflow)
STARTABLE = (Decision.Status.APPROVED, Decision.Status.APPROVED_WITH_CONDITIONS)


class RolloutError(ValueError):
    """Input or a state that does not allow the act; the message says which field or why."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def _require(user: Any, decision: Decision) -> None:
    if not teams.can(user, DRAFT_DECISION, team_id=teams.team_id_of(decision)):
        raise PermissionDenied("your role in this decision's team cannot operate its rollouts")


def event_add(*, rollout: Rollout, action: str, actor: Any = None, details: Mapping[str, Any] | None = None,
              at: datetime | None = None) -> RolloutEvent:
    return RolloutEvent.objects.create(
        rollout=rollout, action=action, actor=actor, at=at or timezone.now(), details=json_safe(dict(details or {}))
    )


def stages_check(stages: Any) -> list[dict[str, Any]]:
    """``[{"share": percent (0, 100], "minutes": (0, a week]}, ...]``, shares never falling."""
    if not isinstance(stages, list) or not 1 <= len(stages) <= MAX_STAGES:
        raise RolloutError(f"stages: a list of 1 to {MAX_STAGES} stages", field="stages")
    out: list[dict[str, Any]] = []
    for n, stage in enumerate(stages, start=1):
        share = stage.get("share") if isinstance(stage, Mapping) else None
        minutes = stage.get("minutes") if isinstance(stage, Mapping) else None
        for name, value, top in (("share", share, 100), ("minutes", minutes, MAX_STAGE_MINUTES)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                isinstance(value, int) or math.isfinite(value)  # a huge int is out of bounds, below
            ):
                raise RolloutError(f"stages, stage {n}: {name} must be a number", field="stages")
            if not 0 < value <= top:
                raise RolloutError(f"stages, stage {n}: {name} must be above 0 and at most {top}", field="stages")
        if out and share < out[-1]["share"]:
            raise RolloutError(f"stages, stage {n}: the share never falls ({share} after {out[-1]['share']})",
                               field="stages")
        out.append({"share": share, "minutes": minutes})
    return out


def _fields_check(*, prometheus: str, candidate_pool: str, control_pool: str, alpha: float) -> dict[str, Any]:
    if prometheus not in settings.SPECREVIEW_PROMETHEUS:
        known = ", ".join(sorted(settings.SPECREVIEW_PROMETHEUS)) or "none: set SPECREVIEW_PROMETHEUS"
        raise RolloutError(f"prometheus: {prometheus[:64]!r} is not a registered Prometheus ({known})",
                           field="prometheus")
    pools = {}
    for name, value in (("candidate_pool", candidate_pool), ("control_pool", control_pool)):
        if len(value) > 500:
            raise RolloutError(f"{name}: at most 500 characters", field=name)
        try:
            pools[name] = pool_selector_check(value)
        except ValueError as exc:
            raise RolloutError(f"{name}: {exc}", field=name) from None
    if pools["candidate_pool"] == pools["control_pool"]:
        raise RolloutError("control_pool: the same selector as the candidate's: nothing to compare",
                           field="control_pool")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not MIN_ALPHA <= alpha <= 0.2:
        raise RolloutError(f"alpha: a false-alarm rate from {MIN_ALPHA} to 0.2", field="alpha")
    return pools


def rollout_start(
    *,
    decision: Decision,
    actor: Any,
    prometheus: str,
    candidate_pool: str,
    control_pool: str,
    stages: Sequence[Mapping[str, Any]],
    alpha: float = 0.05,
) -> Rollout:
    """Start a guarded rollout of an approved decision: its triggers copied in full, the first
    stage begins now. RolloutError names the field (or the state) that does not allow it."""
    _require(actor, decision)
    if decision.status not in STARTABLE:
        raise RolloutError(f"decision #{decision.pk} is {decision.status}: only an approved decision rolls out")
    if decision.proposal == Decision.Proposal.KEEP_OFF:
        raise RolloutError("the decision keeps speculation off: there is nothing to roll out")
    pools = _fields_check(prometheus=prometheus, candidate_pool=candidate_pool, control_pool=control_pool,
                          alpha=alpha)
    checked = stages_check(list(stages))
    triggers = [trigger_full(t) for t in decision.rollback_triggers or []]
    if not any(trigger_evaluable(t) for t in triggers):
        raise RolloutError("the decision has no trigger with a query: nothing could be evaluated")
    now = timezone.now()
    try:
        with transaction.atomic():
            rollout = Rollout.objects.create(
                decision=decision, prometheus=prometheus, stages=checked, alpha=float(alpha), triggers=triggers,
                started_by=actor, started_at=now, stage_started_at=now, **pools,
            )
            event_add(rollout=rollout, action="started", actor=actor, at=now,
                      details={"stages": checked, "prometheus": prometheus, **pools, "alpha": float(alpha)})
            notify(event="rollout.started", rollout=rollout)
    except IntegrityError:
        raise RolloutError(f"decision #{decision.pk} already has a rollout in progress") from None
    return rollout


def _locked(rollout: Rollout) -> Rollout:
    return Rollout.objects.select_for_update().select_related("decision__experiment__trace").get(pk=rollout.pk)


def _reason(reason: str, *, required: bool) -> str:
    reason = (reason or "").strip()
    if required and not reason:
        raise RolloutError("reason: say why", field="reason")
    if len(reason) > REASON_MAX_CHARS:
        raise RolloutError(f"reason: at most {REASON_MAX_CHARS} characters", field="reason")
    return reason


def _move(rollout: Rollout, *, actor: Any, to: str, allowed: Sequence[str], reason: str, required: bool) -> Rollout:
    _require(actor, rollout.decision)
    text = _reason(reason, required=required)
    with transaction.atomic():
        row = _locked(rollout)
        if row.state not in allowed:
            raise RolloutError(f"rollout #{row.pk} is {row.get_state_display()}: it cannot be {to.replace('_', ' ')}")
        now = timezone.now()
        row.state, row.reason = to, text or row.reason
        if to == Rollout.State.RUNNING:
            row.stage_started_at = now  # the stage's time restarts: a paused stage did not soak
        if to in Rollout.ENDED:
            row.ended_at = now
        row.save()
        event_add(rollout=row, action=to if to != Rollout.State.RUNNING else "resumed", actor=actor, at=now,
                  details={"reason": text} if text else {})
        if to in Rollout.ENDED:
            rollout_archive(rollout=row)
            notify(event=f"rollout.{to}", rollout=row)
    return row


def rollout_pause(*, rollout: Rollout, actor: Any, reason: str = "") -> Rollout:
    return _move(rollout, actor=actor, to=Rollout.State.PAUSED, allowed=(Rollout.State.RUNNING,), reason=reason,
                 required=False)


def rollout_resume(*, rollout: Rollout, actor: Any) -> Rollout:
    """Only a rollout an operator paused resumes: a breach ends in a rollback or a stop."""
    return _move(rollout, actor=actor, to=Rollout.State.RUNNING, allowed=(Rollout.State.PAUSED,), reason="",
                 required=False)


def rollout_stop(*, rollout: Rollout, actor: Any, reason: str) -> Rollout:
    return _move(rollout, actor=actor, to=Rollout.State.STOPPED, allowed=Rollout.ACTIVE, reason=reason,
                 required=True)


def rollout_rolled_back(*, rollout: Rollout, actor: Any, reason: str) -> Rollout:
    """The operator reverted the fleet to the decision's revert config (the console does not)."""
    return _move(rollout, actor=actor, to=Rollout.State.ROLLED_BACK, allowed=Rollout.ACTIVE, reason=reason,
                 required=True)


def rollout_archive(*, rollout: Rollout) -> None:
    """Append the rollout's end state to the hash chain (the caller holds the transaction)."""
    record = archive_record_append(decision=rollout.decision, kind="rollout", bundle=rollout_bundle(rollout))
    Rollout.objects.filter(pk=rollout.pk).update(archive_sha256=record.record_sha256)
    rollout.archive_sha256 = record.record_sha256
