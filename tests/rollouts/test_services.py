"""A rollout's life without a Prometheus answering: who may start one and with what, the states
an operator moves it through, the end archived in the hash chain, looks that found no server or
no data, and the notifications (a signed webhook; the revert webhook of a rollback trigger)."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, transaction

from console import notify
from console.decisions.models import ArchiveRecord, FrozenDecisionError
from console.decisions.selectors import archive_verify
from console.rollouts import notifications, services
from console.rollouts.evaluation import rollout_evaluate
from console.rollouts.models import Look, Rollout, RolloutEvent
from tests.decisions.conftest import draft_make, submitted_make
from tests.support.net import free_port
from tests.support.receivers import http_receiver

pytestmark = pytest.mark.django_db

SECRET = "rollout-hooks"
START = {
    "prometheus": "closed",
    "candidate_pool": 'pool="speculative", model_name=~"llama-.*"',
    "control_pool": 'pool="baseline"',
    "stages": [{"share": 5, "minutes": 30}, {"share": 100, "minutes": 60}],
}


@pytest.fixture
def closed(settings):
    """A registered Prometheus at a port nothing listens on."""
    settings.SPECREVIEW_PROMETHEUS = {"closed": {"url": f"http://127.0.0.1:{free_port()}", "bearer_token_file": ""}}


@pytest.fixture
def rollout(signed, engineer, closed):
    return services.rollout_start(decision=signed, actor=engineer, **START)


def test_it_starts_with_the_decisions_triggers_in_full_and_records_who(rollout, signed, engineer):
    assert rollout.state == "running" and rollout.stage == 0 and rollout.alpha == 0.05
    assert rollout.candidate_pool == 'pool="speculative",model_name=~"llama-.*"'  # normalised
    assert [t["metric"] for t in rollout.triggers] == [t["metric"] for t in signed.rollback_triggers]
    assert all({"query", "compare", "min_samples", "action"} <= set(t) for t in rollout.triggers)
    [event] = RolloutEvent.objects.filter(rollout=rollout)
    assert event.action == "started" and event.actor == engineer


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"prometheus": "elsewhere"}, "prometheus", r"not a registered Prometheus \(closed\)"),
        ({"candidate_pool": 'pool="a"} or vector(1) or {x="'}, "candidate_pool", "after a matcher: separate matchers with commas"),
        ({"candidate_pool": "x" * 501}, "candidate_pool", "at most 500"),
        ({"control_pool": START["candidate_pool"]}, "control_pool", "nothing to compare"),
        ({"stages": []}, "stages", "1 to 20 stages"),
        ({"stages": [{"share": 0, "minutes": 5}]}, "stages", "share must be above 0"),
        ({"stages": [{"share": 50, "minutes": float("nan")}]}, "stages", "minutes must be a number"),
        ({"stages": [{"share": 50, "minutes": 5}, {"share": 10, "minutes": 5}]}, "stages", "never falls"),
        ({"alpha": 0.5}, "alpha", "from 0.0001 to 0.2"),
        ({"alpha": 5e-324}, "alpha", "from 0.0001 to 0.2"),  # 1/alpha overflows: the looks needed never end
        ({"stages": [{"share": 10**400, "minutes": 30}]}, "stages", "at most 100"),
    ],
)
def test_it_refuses_a_bad_start_naming_the_field_and_starts_nothing(signed, engineer, closed, change, field, words):
    with pytest.raises(services.RolloutError, match=words) as refused:
        services.rollout_start(decision=signed, actor=engineer, **(START | change))
    assert refused.value.field == field
    assert not Rollout.objects.exists()


def test_only_an_approved_decision_that_enables_speculation_rolls_out(experiment, engineer, closed):
    draft = draft_make(experiment=experiment, author=engineer)
    with pytest.raises(services.RolloutError, match="only an approved decision"):
        services.rollout_start(decision=draft, actor=engineer, **START)
    submitted = submitted_make(experiment=experiment, author=engineer)
    with pytest.raises(services.RolloutError, match="only an approved decision"):
        services.rollout_start(decision=submitted, actor=engineer, **START)


def test_a_viewer_cannot_start_it(signed, viewer, closed):
    with pytest.raises(PermissionDenied):
        services.rollout_start(decision=signed, actor=viewer, **START)


def test_one_rollout_at_a_time_per_decision(rollout, signed, engineer):
    with pytest.raises(services.RolloutError, match="already has a rollout in progress"):
        services.rollout_start(decision=signed, actor=engineer, **START)
    services.rollout_stop(rollout=rollout, actor=engineer, reason="wrong pools")
    again = services.rollout_start(decision=signed, actor=engineer, **START)
    assert again.state == "running"


def test_an_operator_pauses_resumes_and_the_stage_clock_restarts(rollout, engineer):
    services.rollout_pause(rollout=rollout, actor=engineer, reason="traffic spike")
    rollout.refresh_from_db()
    assert rollout.state == "paused" and rollout.reason == "traffic spike"
    with pytest.raises(services.RolloutError, match="cannot be paused"):
        services.rollout_pause(rollout=rollout, actor=engineer)
    before = rollout.stage_started_at
    services.rollout_resume(rollout=rollout, actor=engineer)
    rollout.refresh_from_db()
    assert rollout.state == "running" and rollout.stage_started_at > before
    assert [e.action for e in RolloutEvent.objects.filter(rollout=rollout)] == ["started", "paused", "resumed"]


def test_a_stop_needs_a_reason_and_archives_the_end_in_the_chain(rollout, engineer):
    with pytest.raises(services.RolloutError, match="reason: say why"):
        services.rollout_stop(rollout=rollout, actor=engineer, reason="  ")
    services.rollout_stop(rollout=rollout, actor=engineer, reason="the fleet moved region")
    rollout.refresh_from_db()
    assert rollout.state == "stopped" and rollout.ended_at and rollout.archive_sha256
    record = ArchiveRecord.objects.get(record_sha256=rollout.archive_sha256)
    bundle = json.loads(record.bundle)
    assert record.kind == "rollout" and bundle["rollout"]["state"] == "stopped"
    assert bundle["rollout"]["reason"] == "the fleet moved region" and bundle["decision"]["id"] == rollout.decision_id
    assert archive_verify()["ok"]
    with pytest.raises(services.RolloutError, match="cannot be stopped"):
        services.rollout_stop(rollout=rollout, actor=engineer, reason="twice")
    with pytest.raises(services.RolloutError, match="cannot be running"):
        services.rollout_resume(rollout=rollout, actor=engineer)


def test_a_breached_rollout_is_rolled_back_or_stopped_never_resumed(rollout, engineer):
    Rollout.objects.filter(pk=rollout.pk).update(state="breached")
    with pytest.raises(services.RolloutError, match="cannot be running"):
        services.rollout_resume(rollout=rollout, actor=engineer)
    services.rollout_rolled_back(rollout=rollout, actor=engineer, reason="reverted at 14:02")
    rollout.refresh_from_db()
    assert rollout.state == "rolled_back" and rollout.archive_sha256


def test_a_tampered_rollout_record_breaks_the_chain(rollout, engineer):
    services.rollout_stop(rollout=rollout, actor=engineer, reason="done")
    record = ArchiveRecord.objects.get(kind="rollout")
    with pytest.raises((FrozenDecisionError, DatabaseError)), transaction.atomic():
        ArchiveRecord.objects.filter(pk=record.pk).update(bundle=record.bundle.replace("done", "fine"))


def test_looks_and_events_are_written_once(rollout, engineer):
    rollout_evaluate(rollout_id=rollout.pk, now=rollout.started_at + timedelta(minutes=2))
    look = Look.objects.filter(rollout=rollout).first()
    with pytest.raises(FrozenDecisionError):
        look.save()
    with pytest.raises(DatabaseError), transaction.atomic():
        Look.objects.filter(pk=look.pk).update(state="ok")
    with pytest.raises(DatabaseError), transaction.atomic():
        RolloutEvent.objects.filter(rollout=rollout).delete()


def test_a_prometheus_that_does_not_answer_is_an_error_look_never_a_breach(rollout):
    rollout_evaluate(rollout_id=rollout.pk, now=rollout.started_at + timedelta(minutes=6))
    rollout.refresh_from_db()
    looks = Look.objects.filter(rollout=rollout)
    evaluable = [t for t in rollout.triggers if t["query"]]
    assert looks.count() == 3 * len(evaluable)  # three 2-minute windows each, taken at their own ends
    assert set(looks.values_list("state", flat=True)) == {"error"}
    assert "unreachable" in looks.first().message or "refused" in looks.first().message.lower()
    assert rollout.state == "running"


def test_the_stages_advance_and_the_last_one_completes_it(rollout):
    rollout_evaluate(rollout_id=rollout.pk, now=rollout.started_at + timedelta(minutes=31))
    rollout.refresh_from_db()
    assert rollout.stage == 1 and rollout.state == "running"
    rollout_evaluate(rollout_id=rollout.pk, now=rollout.started_at + timedelta(minutes=91))
    rollout.refresh_from_db()
    assert rollout.state == "completed" and rollout.archive_sha256
    stages = RolloutEvent.objects.filter(rollout=rollout, action="stage")
    assert [e.details["share"] for e in stages] == [100]


def _verified(headers: dict[str, str], body: bytes) -> bool:
    mac = hmac.new(SECRET.encode(), headers["x-specreview-timestamp"].encode() + b"." + body, hashlib.sha256)
    return headers["x-specreview-signature"] == "sha256=" + mac.hexdigest()


def test_the_webhook_gets_a_rollout_event_signed_with_no_raw_text(settings, rollout):
    payload = notifications.event_payload(event="rollout.breach", rollout=rollout)
    with http_receiver() as (url, got):
        settings.SPECREVIEW_WEBHOOK_URLS, settings.SPECREVIEW_WEBHOOK_SECRET = [url], SECRET
        assert notify.deliver(payload) == []
    [(headers, body)] = got.requests
    assert _verified(headers, body) and headers["x-specreview-event"] == "rollout.breach"
    sent = json.loads(body)
    assert sent["rollout"]["id"] == rollout.pk and sent["decision"]["id"] == rollout.decision_id
    assert sent["rollout"]["path"] == f"/decisions/{rollout.decision_id}/rollouts/{rollout.pk}/"
    assert "prompt" not in body.decode().lower()


def test_a_rollback_triggers_breach_queues_the_revert_webhook_alone(
    settings, rollout, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr(notify.current_app, "send_task", lambda name, kwargs, queue: sent.append(kwargs))
    settings.SPECREVIEW_WEBHOOK_URLS, settings.SPECREVIEW_WEBHOOK_SECRET = ["http://127.0.0.1:9/hook"], SECRET
    settings.SPECREVIEW_ROLLOUT_REVERT_URLS = ["http://127.0.0.1:9/revert"]
    with django_capture_on_commit_callbacks(execute=True):
        assert notifications.revert_request(rollout=rollout) is True
        notifications.notify(event="rollout.breach", rollout=rollout)
    revert, breach = sent
    assert revert["only"] == ["http://127.0.0.1:9/revert"] and revert["payload"]["event"] == "rollout.revert"
    assert revert["payload"]["decision"]["revert_config"] == rollout.decision.rollback_revert_config
    assert breach["only"] is None and breach["payload"]["event"] == "rollout.breach"
    settings.SPECREVIEW_ROLLOUT_REVERT_URLS = []
    assert notifications.revert_request(rollout=rollout) is False


def test_production_is_read_against_what_the_decision_signed(rollout, signed):
    from console.rollouts.selectors import trigger_rows

    rows = {row["trigger"]["metric"]: row for row in trigger_rows(rollout)}
    acceptance = next(row for metric, row in rows.items() if metric.startswith("acceptance rate"))
    # the candidate's acceptance rate and its interval at each load, as the evidence froze them
    assert acceptance["predicted"] == [
        {"load": "1x", "value": 0.6, "lo": 0.56, "hi": 0.64},
        {"load": "4x", "value": 0.55, "lo": 0.4987, "hi": 0.6},
    ]
    tpot = next(row for metric, row in rows.items() if metric.startswith("p95 TPOT"))
    assert tpot["predicted"] and all(set(p) == {"load", "delta", "lo", "hi"} for p in tpot["predicted"])
    # preemptions, KV usage, aborted and invalid shares: nothing the evaluation measured the same way
    unpredicted = [metric for metric, row in rows.items() if not row["predicted"]]
    assert len(unpredicted) == 4 and not any(m.startswith(("acceptance", "p95 TPOT")) for m in unpredicted)
