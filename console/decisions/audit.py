"""What every write of a decision shares: the error a user can act on, the team permission check and
the audit event (who, their role in the decision's team, when). Used by ``services`` (drafting,
editing, submitting, exports) and ``signing`` (signatures)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import PermissionDenied
from django.utils import timezone

from console.accounts import teams
from console.accounts.services import user_role
from console.decisions.models import AuditEvent, Decision
from console.experiments.models import Experiment
from console.jsonutil import json_safe


class DecisionError(ValueError):
    """An invalid request about a decision; the message says what to fix."""


def audit_event_write(
    *, decision: Decision, action: str, actor: Any, details: Mapping[str, Any] | None = None
) -> AuditEvent:
    """Append one audit event to ``decision``'s trail, with ``actor``'s role in its team now."""
    return AuditEvent.objects.create(
        decision=decision,
        action=action,
        actor=actor,
        actor_role=user_role(actor, team_id=teams.team_id_of(decision)) or "",
        at=timezone.now(),
        details=json_safe(dict(details or {})),
    )


def permission_require(user: Any, perm: str, *, experiment: Experiment) -> None:
    """PermissionDenied unless ``user`` holds ``perm`` in the team owning ``experiment`` (and so the decision)."""
    if not teams.can(user, perm, team_id=teams.team_id_of(experiment)):
        raise PermissionDenied(f"needs permission {perm} in the experiment's team")
