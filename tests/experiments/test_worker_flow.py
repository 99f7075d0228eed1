"""Experiments through a real Celery worker on the real broker and Postgres.

The engine here is the `openai` engine against the local scripted streaming server
(workers/testing): it streams at known times, so a run's length is known and a test can
cancel mid-run. The hf-engine matrix (baseline, ngram sweep, draft model) is in
test_hf_experiment.py.
"""

from __future__ import annotations

import os
import signal

import pytest

from console.analysis.models import RequestResult
from console.experiments.models import Experiment, Run
from console.experiments.services import (
    experiment_cancel,
    experiment_create,
    experiment_start,
    run_retry,
    runs_reap_stale,
)
from tests.conftest import wait_for
from tests.experiments.factories import script_prompt, trace_make

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def server():
    from workers.testing.stream_server import stream_server_start

    srv = stream_server_start()
    yield srv
    srv.stop()


def _experiment(server, *, prompts, repeats=1, loads="1x", warmup=0, name="flow"):
    trace = trace_make(name=name, prompts=prompts)
    return experiment_create(
        name=name,
        trace=trace,
        engine="openai",
        target_model="scripted",
        baseline_engine_args={"base_url": server.base_url, "endpoint": "completions"},
        candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": [2, 4]}}],
        load_levels=loads,
        repeats=repeats,
        warmup=warmup,
    )


def test_it_runs_the_matrix_with_the_same_requests_and_schedule_for_every_arm(celery_worker_proc, server):
    experiment = _experiment(
        server, prompts=[script_prompt(tokens=4) for _ in range(6)], repeats=2, loads="1x,2x"
    )
    experiment_start(experiment=experiment)
    wait_for(
        lambda: Experiment.objects.get(pk=experiment.pk).status == "done", timeout=120, what="experiment done"
    )
    runs = list(Run.objects.filter(experiment=experiment).order_by("order"))
    assert len(runs) == 3 * 2 * 2 and all(r.status == "done" for r in runs)
    # Executed in the stored interleaved order: each run started after the one before it.
    starts = [r.started_at for r in runs]
    assert starts == sorted(starts)
    schedules = {}
    for run in runs:
        rows = list(RequestResult.objects.filter(run=run).order_by("request_id"))
        assert len(rows) == 6 and all(not r.error and r.num_output_tokens == 4 for r in rows)
        key = (run.load_label, run.repeat)
        schedule = [(r.request_id, round(r.scheduled_s, 9)) for r in rows]
        schedules.setdefault(key, schedule)
        assert schedule == schedules[key], f"run {run.pk} replayed a different schedule"
    assert schedules[("2x", 0)] == [(rid, round(s / 2, 9)) for rid, s in schedules[("1x", 0)]]


def test_it_cancels_mid_run_leaving_nothing_running_and_no_orphan_results(celery_worker_proc, server):
    slow = [script_prompt(ttft_s=0.2, gap_s=0.2, tokens=10) for _ in range(4)]
    experiment = _experiment(server, prompts=slow, repeats=2)
    experiment_start(experiment=experiment)
    running = wait_for(
        lambda: Run.objects.filter(experiment=experiment, status="running").first(),
        timeout=60,
        what="a running run",
    )
    experiment_cancel(experiment=experiment)
    wait_for(
        lambda: not Run.objects.filter(experiment=experiment, status__in=["running", "queued"]).exists(),
        timeout=60,
        what="no run left running",
    )
    running.refresh_from_db()
    assert running.status == "cancelled"
    assert not RequestResult.objects.filter(run__experiment=experiment).exists()
    assert Experiment.objects.get(pk=experiment.pk).status == "cancelled"


def test_it_retries_a_run_lost_with_its_worker_and_replaces_its_results(celery_worker_proc, server, tmp_path):
    prompts = [script_prompt(ttft_s=0.3, gap_s=0.3, tokens=8) for _ in range(3)]
    experiment = _experiment(server, prompts=prompts)
    experiment_start(experiment=experiment)
    victim = wait_for(
        lambda: Run.objects.filter(
            experiment=experiment, status="running", progress_at__isnull=False
        ).first(),
        timeout=60,
        what="a running run",
    )
    os.kill(celery_worker_proc.pid, signal.SIGKILL)  # the worker dies mid-run
    celery_worker_proc.wait(timeout=30)
    assert runs_reap_stale(older_than_s=0) == 1
    victim.refresh_from_db()
    assert victim.status == "failed" and "worker lost" in victim.error
    assert run_retry(run=victim)
    # A fresh worker picks up the retried run (and the runs still queued).
    from tests.conftest import _worker_start

    with _worker_start(tmp_path / "worker2.log"):
        wait_for(lambda: Run.objects.get(pk=victim.pk).status == "done", timeout=120, what="retried run done")
    victim.refresh_from_db()
    assert victim.attempt == 2
    rows = RequestResult.objects.filter(run=victim)
    assert rows.count() == 3
    assert sorted(rows.values_list("request_id", flat=True)) == ["r0", "r1", "r2"]


def test_it_renders_the_comparison_of_an_experiment_run_by_the_real_worker(
    celery_worker_proc, server, viewer_client
):
    prompts = [script_prompt(ttft_s=0.01, gap_s=0.01, tokens=6) for _ in range(8)]
    experiment = _experiment(server, prompts=prompts, repeats=2, loads="1x,2x", name="cmp")
    experiment_start(experiment=experiment)
    wait_for(
        lambda: Experiment.objects.get(pk=experiment.pk).status == "done", timeout=120, what="experiment done"
    )
    page = viewer_client.get(f"/analysis/experiments/{experiment.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    for section in (
        "Headline",
        "End-to-end latency CDF",
        "TPOT p50 vs load",
        "Acceptance rate by task",
        "Acceptance over output position",
        "Draft-length sweep",
        "Peak memory per arm",
        "Noise floor",
        "Quality regressions",
    ):
        assert section in html, section
    run = Run.objects.filter(experiment=experiment, status="done").first()
    assert viewer_client.get(f"/analysis/runs/{run.pk}/").status_code == 200
    csv_text = b"".join(
        viewer_client.get(f"/analysis/experiments/{experiment.pk}/results.csv").streaming_content
    )
    assert csv_text.decode().count("\n") == 1 + 3 * 2 * 2 * 8
    summary = viewer_client.get(f"/api/experiments/{experiment.pk}/comparison").json()
    assert {row["arm"] for row in summary["headline"]} == {"baseline", "ngram k=2", "ngram k=4"}
