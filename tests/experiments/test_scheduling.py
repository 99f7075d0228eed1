"""Lockstep scheduling: with many workers on one queue, an experiment's runs still execute one
at a time in the matrix order (console/experiments/scheduling.py; issue 21, point 6)."""

from __future__ import annotations

import contextlib

import pytest

from console.experiments.models import Experiment, Run
from console.experiments.runs import experiment_status_refresh, runs_reap
from console.experiments.services import ExperimentInvalid, experiment_create, experiment_start
from tests.conftest import _worker_start, wait_for
from tests.experiments.factories import trace_make

NGRAM = {"method": "ngram", "num_speculative_tokens": 2}


def _experiment(server: str, *, scheduling: str, prompts=("a", "b")) -> Experiment:
    return experiment_create(
        name=f"sched-{scheduling}",
        trace=trace_make(prompts=list(prompts), arrivals=[0.0, 0.3][: len(prompts)]),
        engine="openai",
        target_model="m",
        baseline_engine_args={"server": server},
        candidates=[{"speculative_config": NGRAM}],
        repeats=2,
        warmup=0,
        scheduling=scheduling,
    )


@pytest.mark.django_db
def test_it_refuses_an_unknown_mode_by_its_field(openai_register):
    openai_register("http://127.0.0.1:9/v1", name="s")
    with pytest.raises(ExperimentInvalid) as caught:
        _experiment("s", scheduling="fastest")
    assert "lockstep" in caught.value.errors["scheduling"][0]


@pytest.mark.django_db
def test_lockstep_releases_one_run_at_a_time_in_matrix_order_and_parallel_all_at_once(openai_register):
    openai_register("http://127.0.0.1:9/v1", name="s")
    parallel = _experiment("s", scheduling="parallel")
    assert experiment_start(experiment=parallel) == 4
    assert not Run.objects.filter(experiment=parallel, celery_task_id="").exists()

    lockstep = _experiment("s", scheduling="lockstep")
    assert experiment_start(experiment=lockstep) == 1
    runs = list(Run.objects.filter(experiment=lockstep).order_by("order"))
    assert [bool(r.celery_task_id) for r in runs] == [True, False, False, False]
    # the reaper does not send runs that are waiting for their turn
    assert not set(runs_reap().resent) & {r.pk for r in runs[1:]}
    for i, run in enumerate(runs):
        released = [bool(r.celery_task_id) for r in Run.objects.filter(experiment=lockstep).order_by("order")]
        assert released == [True] * (i + 1) + [False] * (len(runs) - i - 1)
        Run.objects.filter(pk=run.pk).update(status=Run.Status.DONE)
        experiment_status_refresh(experiment_id=lockstep.pk)
    assert Experiment.objects.get(pk=lockstep.pk).status == Experiment.Status.DONE


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_two_workers_run_a_lockstep_experiment_in_matrix_order_without_overlap(openai_register, tmp_path):
    from tests.support.stream_server import Script, stream_server_start
    from workers.celery import app

    server = stream_server_start(script=Script(tokens=[1, 2, 3]), model="m")
    app.control.purge()
    try:
        openai_register(server.base_url, name="scripted")
        experiment = _experiment("scripted", scheduling="lockstep")
        with contextlib.ExitStack() as stack:
            for name in ("w1", "w2"):
                stack.enter_context(_worker_start(tmp_path / f"{name}.log"))
            experiment_start(experiment=experiment)
            wait_for(
                lambda: Experiment.objects.get(pk=experiment.pk).status not in ("running", "draft"),
                timeout=180,
                what="the lockstep experiment ended",
            )
    finally:
        server.stop()
        app.control.purge()
    runs = list(Run.objects.filter(experiment=experiment).order_by("order"))
    assert all(r.status == "done" for r in runs), [(r.order, r.status, r.error) for r in runs]
    assert all(r.worker for r in runs)
    # the invariant, from the stored runs: each started after the one before it in the matrix ended
    for before, after in zip(runs, runs[1:], strict=False):
        assert before.finished_at <= after.started_at, (before.order, before.finished_at, after.order, after.started_at)
