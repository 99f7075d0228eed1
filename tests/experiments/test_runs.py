"""The run lifecycle (console/experiments/runs.py) on the real Postgres and Redis.

Runs here are claimed and written by the test itself, standing in for a worker; the
faults with a real worker process are in test_run_faults.py.
"""

from __future__ import annotations

import datetime
import time

import pytest
from django.utils import timezone

from console.experiments.models import Experiment, Run
from console.experiments.runs import (
    broker_task_ids,
    run_claim,
    run_fail,
    run_heartbeat,
    run_retry,
    runs_reap,
)
from console.experiments.services import experiment_cancel, experiment_start
from console.results.models import RequestResult
from console.results.services import results_store as run_finish
from tests.conftest import wait_for
from tests.experiments.factories import scripted_experiment_make

NOWHERE = "http://127.0.0.1:9/v1"  # nothing listens there: these runs are claimed by the test


@pytest.fixture(autouse=True)
def _nowhere_registered(openai_register):
    openai_register(NOWHERE)


def _experiment(*, name="life", prompts=2, repeats=1) -> Experiment:
    return scripted_experiment_make(
        base_url=NOWHERE,
        prompts=[f"p{i}" for i in range(prompts)],
        name=name,
        repeats=repeats,
    )


def _started(**kwargs) -> Experiment:
    experiment = _experiment(**kwargs)
    experiment_start(experiment=experiment)
    return experiment


def _silence(run: Run, seconds: float) -> None:
    """The worker holding ``run`` has said nothing for ``seconds``."""
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - datetime.timedelta(seconds=seconds))


def _rows(run: Run, n: int, **fields) -> list[RequestResult]:
    requests = list(run.experiment.trace.requests.order_by("position"))
    return [
        RequestResult(
            run_id=run.pk,
            trace_request=requests[i],
            request_id=requests[i].request_id,
            scheduled_s=0.1 * i,
            **fields,
        )
        for i in range(n)
    ]


def _telemetry() -> dict:
    return {"peak_memory_bytes": 1, "counters": {}, "samples": []}


@pytest.mark.django_db
def test_it_starts_the_heartbeat_at_the_claim_so_a_retried_run_loading_its_model_is_not_reaped():
    experiment = _started()
    run = experiment.runs.order_by("order").first()
    token = run_claim(run_id=run.pk, worker="w1")
    run_fail(run_id=run.pk, token=token, message="boom")
    # Its first attempt reported progress long ago.
    Run.objects.filter(pk=run.pk).update(progress_at=timezone.now() - datetime.timedelta(hours=2))
    run.refresh_from_db()
    assert run_retry(run=run)
    assert run_claim(run_id=run.pk, worker="w2")  # now loading its model, no progress yet
    report = runs_reap(stale_after_s=60)
    run.refresh_from_db()
    assert run.pk not in report.requeued + report.failed and run.status == "running"
    assert run.attempt == 2


@pytest.mark.django_db
def test_it_writes_nothing_for_a_worker_that_lost_its_claim():
    experiment = _started()
    run = experiment.runs.order_by("order").first()
    first = run_claim(run_id=run.pk, worker="w1")
    _silence(run, 300)
    assert runs_reap(stale_after_s=60).requeued == [run.pk]
    second = run_claim(run_id=run.pk, worker="w2")
    assert second and second != first
    # The first worker comes back from a long pause: every write of its attempt is refused.
    assert run_heartbeat(run_id=run.pk, token=first, done=1, total=2) == "lost"
    assert not run_finish(run_id=run.pk, token=first, rows=_rows(run, 2), telemetry=_telemetry(), wall_s=1)
    assert not run_fail(run_id=run.pk, token=first, message="late failure")
    run.refresh_from_db()
    assert run.status == "running" and run.worker == "w2" and run.error == "" and run.progress_done == 0
    assert not RequestResult.objects.filter(run=run).exists()
    assert run_finish(run_id=run.pk, token=second, rows=_rows(run, 2), telemetry=_telemetry(), wall_s=1)
    assert RequestResult.objects.filter(run=run).count() == 2


@pytest.mark.django_db
def test_it_requeues_a_lost_run_up_to_the_attempt_limit_then_fails_it():
    experiment = _started()
    run = experiment.runs.order_by("order").first()
    for attempt in (1, 2):
        assert run_claim(run_id=run.pk, worker=f"w{attempt}")
        _silence(run, 300)
        assert runs_reap(stale_after_s=60, max_attempts=3).requeued == [run.pk]
        run.refresh_from_db()
        assert run.status == "queued" and "worker lost" in run.error and run.heartbeat_at is None
    assert run_claim(run_id=run.pk, worker="w3")
    _silence(run, 300)
    assert runs_reap(stale_after_s=60, max_attempts=3).failed == [run.pk]
    run.refresh_from_db()
    assert run.status == "failed" and "worker lost" in run.error and "attempt 3 of 3" in run.error


@pytest.mark.django_db
def test_it_ends_a_lost_run_whose_experiment_was_cancelled():
    experiment = _started()
    run = experiment.runs.order_by("order").first()
    assert run_claim(run_id=run.pk, worker="w1")
    experiment_cancel(experiment=experiment)  # the worker is already dead: nobody sees the cancel
    _silence(run, 300)
    assert runs_reap(stale_after_s=60).cancelled == [run.pk]
    assert not Run.objects.filter(experiment=experiment, status__in=["running", "queued"]).exists()
    assert Experiment.objects.get(pk=experiment.pk).status == "cancelled"


@pytest.mark.django_db
def test_it_reports_a_pending_cancel_in_the_heartbeat():
    experiment = _started()
    run = experiment.runs.order_by("order").first()
    token = run_claim(run_id=run.pk, worker="w1")
    assert run_heartbeat(run_id=run.pk, token=token, done=1, total=2) == "ok"
    experiment_cancel(experiment=experiment)
    assert run_heartbeat(run_id=run.pk, token=token) == "cancel"
    run.refresh_from_db()
    assert run.progress_done == 1 and run.heartbeat_at is not None


@pytest.mark.django_db
def test_it_stores_nul_bytes_and_overlong_finish_reasons_with_a_note():
    experiment = _started()
    run = experiment.runs.order_by("order").first()
    token = run_claim(run_id=run.pk, worker="w1")
    rows = _rows(run, 2, output_text="a\x00b", finish_reason="x" * 50, error="")
    rows[1].error = "server said \x00"
    telemetry = {**_telemetry(), "counters": {"note": "n\x00", "ratio": float("nan")}}
    assert run_finish(run_id=run.pk, token=token, rows=rows, telemetry=telemetry, wall_s=1.0)
    stored = list(RequestResult.objects.filter(run=run).order_by("request_id"))
    assert [r.output_text for r in stored] == ["ab", "ab"]
    assert all(r.finish_reason == "x" * 40 for r in stored)
    assert stored[1].error == "server said "
    run.refresh_from_db()
    assert run.status == "done"
    assert "NUL bytes removed from output_text (2x)" in run.error
    assert "finish_reason cut to 40 characters (2x)" in run.error
    assert run.telemetry.counters == {"note": "n", "ratio": None}


@pytest.mark.django_db
def test_it_never_reaps_on_a_page_get(viewer_client):
    experiment = _started()
    run = experiment.runs.order_by("order").first()
    assert run_claim(run_id=run.pk, worker="w1")
    _silence(run, 3 * 3600)
    Run.objects.filter(pk=run.pk).update(progress_at=timezone.now() - datetime.timedelta(hours=3))
    assert viewer_client.get(f"/experiments/{experiment.pk}/").status_code == 200
    assert viewer_client.get(f"/experiments/{experiment.pk}/live/").status_code == 200
    run.refresh_from_db()
    assert run.status == "running" and run.error == ""


@pytest.mark.django_db
def test_it_leaves_a_run_queued_with_the_reason_when_the_broker_refuses_it(
    monkeypatch, django_capture_on_commit_callbacks
):
    from celery import current_app

    def refuse(*args, **kwargs):
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(current_app, "send_task", refuse)
    experiment = _experiment()
    with django_capture_on_commit_callbacks(execute=True):
        experiment_start(experiment=experiment)
    runs = list(experiment.runs.all())
    assert runs and all(r.status == "queued" and "waiting for the broker" in r.error for r in runs)


@pytest.mark.django_db(transaction=True)
def test_it_resends_queued_runs_whose_messages_the_broker_lost():
    from workers.celery import app

    app.control.purge()
    experiment = _started()
    runs = list(experiment.runs.order_by("order"))
    held = broker_task_ids(queues={"cpu"})
    assert {r.celery_task_id for r in runs} <= held
    assert runs_reap(stale_after_s=60, resend_after_s=0).resent == []  # their messages are there
    app.control.purge()  # the broker loses them
    report = runs_reap(stale_after_s=60, resend_after_s=0)
    assert sorted(report.resent) == sorted(r.pk for r in runs)
    fresh = {r.celery_task_id for r in experiment.runs.all()}
    assert not fresh & {r.celery_task_id for r in runs} and fresh <= broker_task_ids(queues={"cpu"})
    app.control.purge()


@pytest.mark.django_db(transaction=True)
def test_it_reaps_on_the_embedded_workers_timer(settings):
    from workers.celery import app
    from workers.embedded import reaper_timer

    settings.SPECREVIEW_RUN_STALE_AFTER_S = 2
    experiment = _started()
    run = experiment.runs.order_by("order").first()
    assert run_claim(run_id=run.pk, worker="w1")  # and then the worker dies
    started = time.monotonic()
    with reaper_timer(interval_s=0.5):
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status == "queued", timeout=30, what="the lost run re-queued"
        )
    assert time.monotonic() - started < 30
    assert "worker lost" in Run.objects.get(pk=run.pk).error
    app.control.purge()


def test_it_schedules_the_reaper_on_beat_in_its_own_queue():
    from django.conf import settings

    import workers.tasks  # noqa: F401 - registers the tasks
    from workers.celery import app

    schedule = settings.CELERY_BEAT_SCHEDULE["runs-reap"]
    assert schedule["task"] == "workers.runs_reap"
    assert schedule["schedule"] == settings.SPECREVIEW_REAP_EVERY_S
    assert app.conf.task_routes["workers.runs_reap"]["queue"] == "housekeeping"
    assert "workers.runs_reap" in app.tasks


@pytest.mark.django_db
def test_it_packs_a_finished_runs_rows_and_drops_the_pack_with_them():
    from console.results.models import RunResultsPack
    from console.results.selectors import results_frames

    experiment = _started()
    run = experiment.runs.order_by("order").first()
    token = run_claim(run_id=run.pk, worker="w1")
    rows = _rows(run, 2, output_text="hé", chunk_times=[0.25, 0.5], chunk_tokens=[1, 2], num_output_tokens=3)
    assert run_finish(run_id=run.pk, token=token, rows=rows, telemetry=_telemetry(), wall_s=1.0)
    pack = RunResultsPack.objects.get(run=run)
    ids = sorted(RequestResult.objects.filter(run=run).values_list("pk", flat=True))
    assert (pack.n_rows, pack.max_result_id) == (2, ids[-1])
    requests, _ = results_frames(runs=[Run.objects.get(pk=run.pk)])
    assert requests["result_id"].tolist() == ids and requests["output_text"].tolist() == ["hé", "hé"]
    assert [c.tolist() for c in requests["chunk_times"]] == [[0.25, 0.5], [0.25, 0.5]]
    # run again (a rerun): the new rows replace the old ones, and so does the pack
    Run.objects.filter(pk=run.pk).update(status=Run.Status.QUEUED, attempt_token="")
    token = run_claim(run_id=run.pk, worker="w2")
    assert run_finish(run_id=run.pk, token=token, rows=_rows(run, 1), telemetry=_telemetry(), wall_s=1.0)
    pack = RunResultsPack.objects.get(run=run)
    assert (pack.n_rows, pack.max_result_id) == (1, RequestResult.objects.get(run=run).pk)
    # a failed attempt deletes the rows, and the pack with them
    Run.objects.filter(pk=run.pk).update(status=Run.Status.QUEUED, attempt_token="")
    token = run_claim(run_id=run.pk, worker="w3")
    assert run_fail(run_id=run.pk, token=token, message="boom")
    assert not RunResultsPack.objects.filter(run=run).exists()
