"""Notifications of a decision's events (issue 25): a webhook POST signed with HMAC-SHA256 and an
e-mail through Django's e-mail backend, both configured by an operator (settings, never a form),
both sent by a worker (task ``workers.notify`` on the housekeeping queue) once the transaction
that made the event commits, each target retried on its own until it answers.

The webhook request (docs/notifications.md): ``POST`` of the JSON payload with

- ``X-Specreview-Event``: the event (``decision.submitted``, ``decision.signed``);
- ``X-Specreview-Delivery``: the payload's id, the same on every retry (a receiver dedupes on it);
- ``X-Specreview-Timestamp``: seconds since the epoch when this attempt was signed;
- ``X-Specreview-Signature``: ``sha256=`` and the hex HMAC-SHA256, keyed by
  ``SPECREVIEW_WEBHOOK_SECRET``, of ``TIMESTAMP.BODY`` (the timestamp, a dot, the raw body), so a
  receiver checks the body and refuses a replayed old one.

The payload names the decision, its team, status, proposal, gate and (signed) signer and archive
hashes: no prompt or output ever, and no link with a host (the console does not know its own).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from console.decisions.models import Decision

log = logging.getLogger(__name__)

NOTIFY_TASK = "workers.notify"
EVENTS = ("decision.submitted", "decision.signed")
EMAIL_TARGET = "email"


class DeliveryError(Exception):
    """A target did not take the notification (refused, unreachable, or not 2xx)."""


def targets() -> list[str]:
    """Where notifications go: each webhook URL, and ``email`` when addresses are configured."""
    return [*settings.SPECREVIEW_WEBHOOK_URLS, *([EMAIL_TARGET] if settings.SPECREVIEW_NOTIFY_EMAILS else [])]


def event_payload(*, event: str, decision: Decision) -> dict[str, Any]:
    """The JSON a target receives for ``event`` on ``decision``."""
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}: one of {', '.join(EVENTS)}")
    signoff = getattr(decision, "signoff", None) if decision.is_signed else None
    record = getattr(decision, "archive", None) if decision.is_signed else None
    return {
        "event": event,
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
            "signer": signoff.signer_username if signoff else None,
            "archive": {"sequence": record.sequence, "record_sha256": record.record_sha256}
            if record
            else None,
        },
    }


def notify(*, event: str, decision: Decision) -> None:
    """Send ``event`` to every configured target once the surrounding transaction commits (nothing
    when none is configured). A broker that refuses the task is logged: a notification never undoes
    the act it reports."""
    if not targets():
        return
    payload = event_payload(event=event, decision=decision)

    def send() -> None:
        try:
            current_app.send_task(NOTIFY_TASK, kwargs={"payload": payload}, queue=settings.HOUSEKEEPING_QUEUE)
        except Exception:
            log.exception("notification %s of decision %s: the broker refused its task", event, decision.pk)

    transaction.on_commit(send)


def signature(*, secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=`` and the hex HMAC-SHA256 of ``TIMESTAMP.BODY``."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def webhook_deliver(url: str, payload: dict[str, Any], *, timeout: float = 10.0) -> int:
    """POST ``payload`` to ``url``, signed; its status, or ``DeliveryError`` saying why not."""
    body = json.dumps(payload, sort_keys=True).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "specreview-notify",
        "X-Specreview-Event": payload["event"],
        "X-Specreview-Delivery": payload["delivery"],
        "X-Specreview-Timestamp": timestamp,
        "X-Specreview-Signature": signature(
            secret=settings.SPECREVIEW_WEBHOOK_SECRET or "", timestamp=timestamp, body=body
        ),
    }
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - operator's URL
            return response.status
    except urllib.error.HTTPError as exc:
        raise DeliveryError(f"{url} answered {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DeliveryError(f"{url} unreachable: {getattr(exc, 'reason', exc)}") from None


def email_send(payload: dict[str, Any]) -> int:
    """The notification as a plain-text e-mail to ``SPECREVIEW_NOTIFY_EMAILS``."""
    d = payload["decision"]
    subject = f"[specreview] decision #{d['id']} {payload['event'].split('.', 1)[1]}: {d['title']}"[:200]
    lines = [f"{k}: {v}" for k, v in d.items() if v is not None]
    try:
        return send_mail(
            subject,
            "\n".join([f"event: {payload['event']}", f"at: {payload['at']}", *lines]),
            settings.DEFAULT_FROM_EMAIL,
            settings.SPECREVIEW_NOTIFY_EMAILS,
        )
    except OSError as exc:
        raise DeliveryError(f"e-mail not sent: {exc}") from None


def deliver(payload: dict[str, Any], *, only: list[str] | None = None) -> list[str]:
    """Deliver ``payload`` to every target (or to ``only`` those, on a retry); the targets that
    failed, each logged with why."""
    failed = []
    for target in only if only is not None else targets():
        try:
            email_send(payload) if target == EMAIL_TARGET else webhook_deliver(target, payload)
        except DeliveryError as exc:
            log.warning("notification %s (%s): %s", payload["delivery"], payload["event"], exc)
            failed.append(target)
    return failed
