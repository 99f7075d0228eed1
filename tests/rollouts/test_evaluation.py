"""A guarded rollout against a real Prometheus: a regression planted in the candidate's TPOT
fires the TPOT trigger within a bounded number of looks and pauses the rollout ("rollback
recommended"); an A/A rollout (the control against its twin) runs every stage without a breach
and completes, archived in the hash chain. Every trigger the decision drafted from its
evidence is evaluated (none is left without data)."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from console.decisions.models import ArchiveRecord
from console.decisions.selectors import archive_verify
from console.rollouts import services
from console.rollouts.evaluation import rollout_evaluate
from console.rollouts.models import Look, Rollout, RolloutEvent
from tests.decisions.conftest import signed_make

pytestmark = pytest.mark.django_db

WINDOW_MIN = 0.05  # a look every 3 s: Prometheus scrapes every second
MAX_LOOKS = 12


def _start(decision, actor, *, candidate, alpha, minutes, held_back=()):
    rollout = services.rollout_start(
        decision=decision, actor=actor, prometheus="test", candidate_pool=f'pool="{candidate}"',
        control_pool='pool="baseline"', stages=[{"share": 10, "minutes": minutes / 2}, {"share": 50, "minutes": minutes / 2}],
        alpha=alpha,
    )
    # The decision's looks are two minutes apart; this rollout looks every 3 s, 3 looks first
    # (a trigger held back needs more looks than the test takes: it is looked at, never breaches).
    short = [
        t | {"window_min": WINDOW_MIN, "min_samples": 10 * MAX_LOOKS if t["metric"].startswith(held_back) else 3}
        for t in rollout.triggers
    ]
    Rollout.objects.filter(pk=rollout.pk).update(triggers=short)
    return rollout


def test_a_planted_regression_breaches_and_an_aa_rollout_completes(
    signed, experiment, engineer, approver, metrics, registered
):
    metrics.set(pool="candidate", tpot_median_s=0.030)  # p95 about 15 ms above the control's
    duration_min = MAX_LOOKS * WINDOW_MIN
    # End-to-end latency carries the same regression (200 tokens of it) and may cross first: the
    # first breach pauses the rollout, so it is held back here and the trigger under test is TPOT's.
    regressed = _start(
        signed, engineer, candidate="candidate", alpha=0.05, minutes=duration_min, held_back=("p95 end-to-end",)
    )
    twin = signed_make(experiment=experiment, author=engineer, signer=approver, title="the same, A/A")
    # alpha 0.01: two of the A/A's triggers sit exactly at their threshold (a difference > 0)
    aa = _start(twin, engineer, candidate="twin", alpha=0.01, minutes=duration_min)
    deadline = time.monotonic() + duration_min * 60 + 30
    while time.monotonic() < deadline and Rollout.objects.filter(state=Rollout.State.RUNNING).exists():
        time.sleep(WINDOW_MIN * 60 / 2)
        for rollout in (regressed, aa):
            rollout_evaluate(rollout_id=rollout.pk)
    regressed.refresh_from_db()
    aa.refresh_from_db()

    assert regressed.state == Rollout.State.BREACHED, regressed.reason
    tpot = next(i for i, t in enumerate(regressed.triggers) if "TPOT" in t["metric"])
    breaches = Look.objects.filter(rollout=regressed, state=Look.State.BREACH)
    assert {look.trigger for look in breaches} == {tpot}, regressed.reason  # TPOT fires, nothing else
    assert breaches.get(trigger=tpot).n <= 8  # within a bounded number of looks
    assert "rollback recommended" in regressed.reason and "TPOT" in regressed.reason
    assert RolloutEvent.objects.filter(rollout=regressed, action="breach").count() == 1

    assert aa.state == Rollout.State.COMPLETED, aa.reason
    assert not Look.objects.filter(rollout=aa, state=Look.State.BREACH).exists()
    assert aa.stage == 1 and aa.archive_sha256
    record = ArchiveRecord.objects.get(record_sha256=aa.archive_sha256)
    assert record.kind == "rollout" and record.rollout_decision_id == twin.pk and '"completed"' in record.bundle
    assert archive_verify()["ok"]  # the chain holds both decisions and the rollout's end
    for rollout in (regressed, aa):
        looked = Look.objects.filter(rollout=rollout)
        # every trigger drafted from the evidence was evaluated, none without data
        assert {look.trigger for look in looked} == set(range(len(rollout.triggers)))
        assert not looked.filter(state__in=[Look.State.NO_DATA, Look.State.ERROR]).exists(), [
            (look.trigger, look.message) for look in looked.exclude(message="")
        ]
        assert RolloutEvent.objects.filter(rollout=rollout, action="looked").count() == looked.count()
    assert timezone.now() >= aa.ended_at
