"""Delivering a notification to the targets an operator configured (settings, never a form): a
webhook POST signed with HMAC-SHA256, and an e-mail through Django's e-mail backend. Nothing here
knows what the notification is about: ``console.decisions.notifications`` makes the payloads and
queues them, and the worker's ``workers.notify`` task calls :func:`deliver` and retries what failed.

The webhook request (docs/notifications.md): ``POST`` of the JSON payload with

- ``X-Specreview-Event``: the payload's ``event``;
- ``X-Specreview-Delivery``: the payload's ``delivery`` id, the same on every retry (a receiver
  dedupes on it);
- ``X-Specreview-Timestamp``: seconds since the epoch when this attempt was signed;
- ``X-Specreview-Signature``: ``sha256=`` and the hex HMAC-SHA256, keyed by
  ``SPECREVIEW_WEBHOOK_SECRET``, of ``TIMESTAMP.BODY`` (the timestamp, a dot, the raw body), so a
  receiver checks the body and refuses a replayed old one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.request
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction

log = logging.getLogger(__name__)

EMAIL_TARGET = "email"
NOTIFY_TASK = "workers.notify"


class DeliveryError(Exception):
    """A target did not take the notification (refused, unreachable, or not 2xx)."""


def targets() -> list[str]:
    """Where notifications go: each webhook URL, and ``email`` when addresses are configured."""
    return [*settings.SPECREVIEW_WEBHOOK_URLS, *([EMAIL_TARGET] if settings.SPECREVIEW_NOTIFY_EMAILS else [])]


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
    """The notification as a plain-text e-mail to ``SPECREVIEW_NOTIFY_EMAILS``: its ``subject``, then
    one ``key: value`` line per field (an object's fields one level in)."""
    lines = []
    for key, value in payload.items():
        if isinstance(value, dict):
            lines += [f"{k}: {v}" for k, v in value.items() if v is not None]
        elif key != "subject":
            lines.append(f"{key}: {value}")
    try:
        return send_mail(
            str(payload["subject"])[:200],
            "\n".join(lines),
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


def notification_queue(payload: dict[str, Any], *, only: list[str] | None = None) -> None:
    """Queue ``workers.notify`` with ``payload`` on the housekeeping queue once the surrounding
    transaction commits (a rolled-back act notifies nobody), for ``only`` those targets or every
    configured one. A broker that refuses the task is logged: a notification never undoes the
    act it reports."""

    def send() -> None:
        try:
            current_app.send_task(
                NOTIFY_TASK, kwargs={"payload": payload, "only": only}, queue=settings.HOUSEKEEPING_QUEUE
            )
        except Exception:
            log.exception("notification %s (%s): the broker refused its task", payload["delivery"], payload["event"])

    transaction.on_commit(send)
