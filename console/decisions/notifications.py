"""Notifications of a decision's events (issue 25): submitted for sign-off, signed. The payload is
made here and queued once the transaction that made the event commits; the housekeeping worker
delivers it (``workers.notify`` -> ``console.notify.deliver``: a signed webhook and an e-mail, each
target retried on its own until it answers; docs/notifications.md).

The payload names the decision, its team, status, proposal, gate and (signed) signer and archive
hashes: no prompt or output ever, and no link with a host (the console does not know its own).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.utils import timezone

from console.decisions.models import Decision
from console.notify import notification_queue, targets

EVENTS = ("decision.submitted", "decision.signed")


def event_payload(*, event: str, decision: Decision) -> dict[str, Any]:
    """The JSON a target receives for ``event`` on ``decision``."""
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}: one of {', '.join(EVENTS)}")
    signoff = getattr(decision, "signoff", None) if decision.is_signed else None
    record = getattr(decision, "archive", None) if decision.is_signed else None
    return {
        "event": event,
        "subject": f"[specreview] decision #{decision.pk} {event.split('.', 1)[1]}: {decision.title}",
        "delivery": uuid.uuid4().hex,
        "at": timezone.now().isoformat(),
        "decision": {
            "id": decision.pk,
            "title": decision.title,
            "team": decision.experiment.trace.team.name,
            "status": decision.status,
            "proposal": decision.proposal,
            "traffic_class": decision.traffic_class,
            "experiment_id": decision.experiment_id,
            "gate": (decision.gate or {}).get("overall"),
            "path": f"/decisions/{decision.pk}/",
            "signer": signoff.signer_username if signoff else None,  # the last signature
            "signers": [s.signer_username for s in decision.signatures()] if signoff else [],
            "approvals_required": decision.approvals_needed,
            "archive": {"sequence": record.sequence, "record_sha256": record.record_sha256}
            if record
            else None,
        },
    }


def notify(*, event: str, decision: Decision) -> None:
    """Send ``event`` to every configured target once the surrounding transaction commits (nothing
    when none is configured; ``console.notify.notification_queue``)."""
    if targets():
        notification_queue(event_payload(event=event, decision=decision))
