"""Notifications (issue 25): a decision's submission and signature reach a webhook on 127.0.0.1,
signed with HMAC-SHA256 over the timestamp and the body, and an SMTP server on 127.0.0.1; a target
that fails is retried by a real worker until it answers, with the same delivery id."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from console import notify
from console.decisions import notifications
from tests.support.receivers import http_receiver, smtp_receiver

SECRET = "test-webhook-secret"


def _verified(headers: dict[str, str], body: bytes) -> bool:
    expected = hmac.new(
        SECRET.encode(), headers["x-specreview-timestamp"].encode() + b"." + body, hashlib.sha256
    ).hexdigest()
    return hmac.compare_digest(headers["x-specreview-signature"], f"sha256={expected}")


@pytest.fixture
def submitted_payload(submitted):
    return notifications.event_payload(event="decision.submitted", decision=submitted)


def test_a_webhook_gets_the_event_signed_and_no_raw_text(settings, submitted_payload, submitted):
    with http_receiver() as (url, got):
        settings.SPECREVIEW_WEBHOOK_URLS, settings.SPECREVIEW_WEBHOOK_SECRET = [url], SECRET
        assert notify.deliver(submitted_payload) == []
    [(headers, body)] = got.requests
    assert _verified(headers, body)
    assert headers["x-specreview-event"] == "decision.submitted"
    assert headers["x-specreview-delivery"] == submitted_payload["delivery"]
    decision = json.loads(body)["decision"]
    assert (
        decision["id"] == submitted.pk and decision["team"] == "default" and decision["status"] == "submitted"
    )
    # a tampered body or another key does not verify
    assert not _verified(headers, body.replace(b"submitted", b"approved"))


def test_a_target_that_fails_or_cannot_be_reached_is_reported_for_a_retry(settings, submitted_payload):
    with http_receiver() as (url, got):
        got.statuses = [503]
        settings.SPECREVIEW_WEBHOOK_URLS, settings.SPECREVIEW_WEBHOOK_SECRET = (
            [url, "http://127.0.0.1:9/"],
            SECRET,
        )
        assert notify.deliver(submitted_payload) == [url, "http://127.0.0.1:9/"]
        assert notify.deliver(submitted_payload, only=[url]) == []  # the retry: that one only
    assert len(got.requests) == 2


def test_an_email_goes_through_django_s_backend_to_an_smtp_server(settings, submitted_payload, submitted):
    with smtp_receiver() as (port, got):
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        settings.SPECREVIEW_NOTIFY_EMAILS = ["oncall@example.org"]
        assert notify.deliver(submitted_payload) == []
    [message] = got.messages
    assert f"decision #{submitted.pk} submitted" in message and "oncall@example.org" in message


def test_nothing_is_sent_without_targets(settings, submitted):
    settings.SPECREVIEW_WEBHOOK_URLS, settings.SPECREVIEW_NOTIFY_EMAILS = [], []
    assert notify.targets() == []


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_delivers_a_signature_and_retries_a_failed_webhook(
    settings, tmp_path, engineer, approver
):
    from console.decisions import services
    from tests.conftest import _worker_start, wait_for
    from tests.decisions.conftest import draft_complete, draft_make
    from tests.decisions.factories import experiment_make
    from workers.celery import app

    with http_receiver() as (url, got):
        got.statuses = [503]  # the first attempt fails: the worker tries again
        settings.SPECREVIEW_WEBHOOK_URLS, settings.SPECREVIEW_WEBHOOK_SECRET = [url], SECRET
        env = {
            "SPECREVIEW_WEBHOOK_URLS": url,
            "SPECREVIEW_WEBHOOK_SECRET": SECRET,
            "SPECREVIEW_NOTIFY_RETRY_S": "1",
        }
        app.control.purge()
        with _worker_start(tmp_path / "worker.log", env=env, queues="housekeeping") as worker:
            experiment = experiment_make(created_by=engineer)
            decision = draft_complete(draft_make(experiment=experiment, author=engineer), actor=engineer)
            services.decision_submit(decision=decision, actor=engineer)
            wait_for(lambda: len(got.requests) >= 2, timeout=60, what=f"two attempts ({worker.log_path})")
        app.control.purge()
    first, second = got.requests[:2]
    assert first[0]["x-specreview-delivery"] == second[0]["x-specreview-delivery"]  # one delivery, retried
    assert all(_verified(h, b) for h, b in got.requests)
    assert json.loads(second[1])["event"] == "decision.submitted"
