"""Notifications of a rollout's events (started, breach, rolled back, stopped, completed), sent to
the targets the decisions' notifications use (``console.notify``), and the revert webhook: a
breached trigger whose action is ``rollback`` posts ``rollout.revert`` to
``SPECREVIEW_ROLLOUT_REVERT_URLS`` (signed the same way), for the operator's automation to act on.
The payload names the rollout, its decision, team, stage and state: no prompt, no output.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.utils import timezone

from console.notify import notification_queue, targets
from console.rollouts.models import Rollout

EVENTS = (
    "rollout.started",
    "rollout.breach",
    "rollout.rolled_back",
    "rollout.stopped",
    "rollout.completed",
    "rollout.revert",
)


def event_payload(*, event: str, rollout: Rollout) -> dict[str, Any]:
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}: one of {', '.join(EVENTS)}")
    decision = rollout.decision
    stage = rollout.stages[min(rollout.stage, len(rollout.stages) - 1)]
    return {
        "event": event,
        "subject": f"[specreview] rollout #{rollout.pk} of decision #{decision.pk} "
        f"{event.split('.', 1)[1].replace('_', ' ')}: {decision.title}",
        "delivery": uuid.uuid4().hex,
        "at": timezone.now().isoformat(),
        "rollout": {
            "id": rollout.pk,
            "state": rollout.state,
            "stage": rollout.stage,
            "share": stage["share"],
            "reason": rollout.reason,
            "path": f"/decisions/{decision.pk}/rollouts/{rollout.pk}/",
            "archive_sha256": rollout.archive_sha256 or None,
        },
        "decision": {
            "id": decision.pk,
            "title": decision.title,
            "team": decision.experiment.trace.team.name,
            "revert_config": decision.rollback_revert_config,
        },
    }


def notify(*, event: str, rollout: Rollout) -> None:
    """``event`` to every configured target once the transaction commits (none configured: nothing)."""
    if targets():
        notification_queue(event_payload(event=event, rollout=rollout))


def revert_request(*, rollout: Rollout) -> bool:
    """Post ``rollout.revert`` to the operator's revert webhooks; False when none is configured."""
    urls = list(settings.SPECREVIEW_ROLLOUT_REVERT_URLS)
    if urls:
        notification_queue(event_payload(event="rollout.revert", rollout=rollout), only=urls)
    return bool(urls)
