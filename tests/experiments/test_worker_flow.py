"""Experiments through a real Celery worker on the real broker and Postgres.

The engine here is the `openai` engine against the local scripted streaming server
(tests/support): it streams at known times, so a run's length is known and a test can
cancel mid-run. The hf-engine matrix (baseline, ngram sweep, draft model) is in
test_hf_experiment.py.
"""

from __future__ import annotations

import pytest

from console.experiments.models import Experiment, Run
from console.experiments.services import experiment_cancel, experiment_start
from console.results.models import RequestResult
from tests.conftest import wait_for
from tests.experiments.factories import script_prompt, scripted_experiment_make

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def server(openai_register):
    """Autouse, so it is registered before celery_worker_proc starts the worker."""
    from tests.support.stream_server import stream_server_start

    srv = stream_server_start()
    openai_register(srv.base_url)
    yield srv
    srv.stop()


def _experiment(server, *, prompts, repeats=1, loads="1x", warmup=0, name="flow"):
    return scripted_experiment_make(
        base_url=server.base_url,
        prompts=prompts,
        name=name,
        repeats=repeats,
        loads=loads,
        warmup=warmup,
        ks=[2, 4],
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


def test_it_renders_the_comparison_of_an_experiment_run_by_the_real_worker(
    celery_worker_proc, server, viewer_client
):
    prompts = [script_prompt(ttft_s=0.01, gap_s=0.01, tokens=6) for _ in range(8)]
    experiment = _experiment(server, prompts=prompts, repeats=2, loads="1x,2x", name="cmp")
    experiment_start(experiment=experiment)
    wait_for(
        lambda: Experiment.objects.get(pk=experiment.pk).status == "done", timeout=120, what="experiment done"
    )
    from console.analysis.selectors import comparison_state

    # The worker computes the comparison when the last run ends; the page only reads it.
    wait_for(lambda: comparison_state(experiment=experiment) == "ready", timeout=180, what="comparison computed")
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
