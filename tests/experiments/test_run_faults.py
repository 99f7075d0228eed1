"""Faults a run must survive, injected for real against real worker processes.

A worker SIGKILLed mid-run, the broker restarted with runs queued (a throwaway
redis-server of our own, never the shared one), the worker's Postgres connection
terminated during the results write, and an engine failing mid-run. The engine is the
`openai` engine against the local scripted streaming server (tests/support).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from console.experiments.models import Experiment, Run
from console.experiments.services import experiment_start
from console.results.models import RequestResult
from tests.conftest import ROOT, _worker_env, _worker_start, wait_for
from tests.experiments.factories import script_prompt, scripted_experiment_make

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAST = {"SPECREVIEW_RUN_HEARTBEAT_S": "1", "SPECREVIEW_RUN_STALE_AFTER_S": "6"}


@pytest.fixture
def server(openai_register):
    from tests.support.stream_server import stream_server_start

    srv = stream_server_start()
    openai_register(srv.base_url)  # before any worker starts: it reads the registry at start
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def _empty_queues():
    from workers.celery import app

    app.control.purge()
    yield
    app.control.purge()


def _experiment(server, *, prompts, name="faults", candidate_args=None, repeats=1):
    return scripted_experiment_make(
        base_url=server.base_url, prompts=prompts, name=name, repeats=repeats, candidate_args=candidate_args
    )


def _results_are_whole(run: Run, n: int) -> None:
    ids = list(RequestResult.objects.filter(run=run).values_list("request_id", flat=True))
    assert sorted(ids) == [f"r{i}" for i in range(n)], f"run {run.pk} has {ids}"


def test_it_reruns_a_run_whose_worker_was_sigkilled_within_a_bounded_time(server, tmp_path, settings):
    from workers.embedded import reaper_timer

    settings.SPECREVIEW_RUN_STALE_AFTER_S = 6
    prompts = [script_prompt(ttft_s=0.3, gap_s=0.3, tokens=8) for _ in range(3)]
    experiment = _experiment(server, prompts=prompts)
    with _worker_start(tmp_path / "w1.log", env=FAST) as first:
        experiment_start(experiment=experiment)
        victim = wait_for(
            lambda: Run.objects.filter(
                experiment=experiment, status="running", progress_at__isnull=False
            ).first(),
            timeout=90,
            what="a run in the middle of its replay",
        )
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    killed = time.monotonic()
    with reaper_timer(interval_s=1), _worker_start(tmp_path / "w2.log", env=FAST):
        wait_for(
            lambda: Run.objects.get(pk=victim.pk).attempt == 2, timeout=60, what="the lost run claimed again"
        )
        rerun_within_s = time.monotonic() - killed
        wait_for(lambda: Experiment.objects.get(pk=experiment.pk).status == "done", timeout=180, what="done")
    # Six seconds of silence, a one-second reaper tick, a worker's start: bounded, not "never".
    assert rerun_within_s < 60
    victim.refresh_from_db()
    assert victim.status == "done" and victim.attempt == 2
    for run in Run.objects.filter(experiment=experiment):
        assert run.status == "done"
        _results_are_whole(run, 3)


@contextlib.contextmanager
def _redis_server(*, port: int, workdir):
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    import redis

    proc = subprocess.Popen(
        [binary, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    try:
        wait_for(lambda: _pings(client), timeout=30, what=f"redis-server on {port}")
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _pings(client) -> bool:
    import redis

    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def _manage(*args: str, env: dict) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_it_loses_no_queued_run_when_the_broker_restarts_empty(server, tmp_path):
    port = 6390
    broker = {**_worker_env(), **FAST, "CELERY_BROKER_URL": f"redis://127.0.0.1:{port}/0"}
    prompts = [script_prompt(ttft_s=0.2, gap_s=0.2, tokens=6) for _ in range(3)]
    experiment = _experiment(server, prompts=prompts, repeats=2)  # 4 runs of about 1.2 s
    with contextlib.ExitStack() as stack:
        first_broker = stack.enter_context(_redis_server(port=port, workdir=tmp_path))
        stack.enter_context(_worker_start(tmp_path / "worker.log", env=broker))
        # Started from another process, as the console would, on the throwaway broker.
        code = (
            "from console.experiments.models import Experiment; "
            "from console.experiments.services import experiment_start; "
            f"print(experiment_start(experiment=Experiment.objects.get(pk={experiment.pk})))"
        )
        assert _manage("shell", "-c", code, env=broker).split()[-1] == "4"
        wait_for(
            lambda: Run.objects.filter(experiment=experiment, status="running").exists(),
            timeout=60,
            what="the first run running",
        )
        # The broker dies with runs queued in it and comes back empty; the worker reconnects.
        first_broker.kill()
        first_broker.wait(timeout=30)
        stack.enter_context(_redis_server(port=port, workdir=tmp_path))
        queued = Run.objects.filter(experiment=experiment, status="queued").count()
        assert queued >= 1

        def reaped_and_done() -> bool:
            _manage("reap_runs", "--older-than", "6", "--resend-after", "0", env=broker)
            return Experiment.objects.get(pk=experiment.pk).status == "done"

        wait_for(reaped_and_done, timeout=180, interval=2, what="every run done")
    for run in Run.objects.filter(experiment=experiment):
        assert run.status == "done" and run.attempt == 1, (run.pk, run.status, run.attempt, run.error)
        _results_are_whole(run, 3)


def _pg_connect(*, autocommit: bool):
    import psycopg
    from django.db import connection

    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
        user=db["USER"] or "postgres",
        dbname=db["NAME"],
        application_name="fault-injector",
        autocommit=autocommit,
    )


def _lock_trace_requests(trace_id: int):
    """A second session holding the trace's requests FOR UPDATE: a results write (its
    foreign-key checks) waits on it, in plain sight in pg_stat_activity."""
    conn = _pg_connect(autocommit=False)
    conn.execute("SELECT id FROM traces_tracerequest WHERE trace_id = %s FOR UPDATE", [trace_id])
    return conn


def _terminate_blocked_writer(lock) -> int:
    """Kill the backend of whichever session waits on ``lock``: the worker's, mid-write."""
    holder = lock.info.backend_pid
    with _pg_connect(autocommit=True) as watch:  # its own session: activity is not snapshotted

        def blocked():
            row = watch.execute(
                "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [holder]
            ).fetchone()
            return row[0] if row else None

        pid = wait_for(blocked, timeout=90, interval=0.1, what="a results write waiting on the lock")
        assert watch.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0]
    return pid


@pytest.mark.parametrize("drops", [1, 2])
def test_it_survives_its_database_connection_dropped_during_the_results_write(server, tmp_path, drops):
    prompts = [script_prompt(ttft_s=0.05, gap_s=0.05, tokens=4) for _ in range(3)]
    experiment = _experiment(server, prompts=prompts)
    lock = _lock_trace_requests(experiment.trace_id)
    try:
        with _worker_start(tmp_path / "worker.log", env=FAST) as worker:
            experiment_start(experiment=experiment)
            pids = [_terminate_blocked_writer(lock) for _ in range(drops)]
            lock.rollback()
            wait_for(
                lambda: Experiment.objects.get(pk=experiment.pk).status in ("done", "failed"),
                timeout=120,
                what="the experiment ended",
            )
            assert worker.poll() is None, "the worker died with its connection"
    finally:
        lock.close()
    assert len(set(pids)) == drops
    runs = list(Run.objects.filter(experiment=experiment).order_by("order"))
    first, other = runs
    assert other.status == "done"
    _results_are_whole(other, 3)
    if drops == 1:  # the write is tried again on a fresh connection
        assert first.status == "done" and first.attempt == 1
        _results_are_whole(first, 3)
    else:
        assert first.status == "failed" and "database connection was lost" in first.error
        assert not RequestResult.objects.filter(run=first).exists()


def test_it_fails_the_run_whose_engine_fails_mid_run_and_goes_on_with_the_others(
    server, tmp_path, openai_register
):
    from tests.support.stream_server import Script, stream_server_start

    # Every stream from this server breaks after two tokens.
    broken = stream_server_start(script=Script(ttft_s=0.02, gap_s=0.02, tokens=[1] * 6, drop_after=2))
    openai_register(broken.base_url, name="broken")
    prompts = [
        script_prompt(ttft_s=0.02, gap_s=0.02, tokens=4),
        # A finish reason longer than the column, and an error message with a NUL byte in it.
        "script:" + '{"tokens": [1, 1, 1, 1], "finish_reason": "' + "x" * 50 + '"}',
        "script:" + '{"status": 500, "message": "bad \\u0000 byte"}',
    ]
    try:
        experiment = _experiment(server, prompts=prompts, candidate_args={"base_url": broken.base_url})
        with _worker_start(tmp_path / "worker.log", env=FAST):
            experiment_start(experiment=experiment)
            wait_for(
                lambda: (
                    not Run.objects.filter(experiment=experiment, status__in=["queued", "running"]).exists()
                ),
                timeout=120,
                what="every run ended",
            )
    finally:
        broken.stop()
    baseline = Run.objects.get(experiment=experiment, arm__is_baseline=True)
    candidate = Run.objects.get(experiment=experiment, arm__is_baseline=False)
    assert candidate.status == "failed", candidate.error
    assert "the engine failed every request" in candidate.error and broken.base_url in candidate.error
    assert not RequestResult.objects.filter(run=candidate).exists()
    assert baseline.status == "done", baseline.error
    _results_are_whole(baseline, 3)
    rows = {r.request_id: r for r in RequestResult.objects.filter(run=baseline)}
    assert rows["r1"].finish_reason == "x" * 40
    assert "\x00" not in rows["r2"].error and "bad  byte" in rows["r2"].error
    assert "1 of 3 requests failed" in baseline.error and "stored with changes" in baseline.error
    assert Experiment.objects.get(pk=experiment.pk).status == "failed"


def test_it_reaps_lost_runs_from_celery_beat_on_the_housekeeping_queue(tmp_path, openai_register):
    from console.experiments.runs import run_claim
    from tests.experiments.factories import scripted_experiment_make

    openai_register("http://127.0.0.1:9/v1")  # nothing listens there: no worker runs it
    experiment = scripted_experiment_make(base_url="http://127.0.0.1:9/v1", prompts=["a", "b"])
    experiment_start(experiment=experiment)
    run = experiment.runs.order_by("order").first()
    assert run_claim(run_id=run.pk, worker="gone")  # a worker that claimed it, then died
    env = {**_worker_env(), **FAST, "SPECREVIEW_REAP_EVERY_S": "1"}
    # The docker-compose `beat` service's command line.
    argv = [sys.executable, "-m", "celery", "-A", "workers.celery", "worker", "--beat", "-Q", "housekeeping"]
    argv += [
        "--concurrency",
        "1",
        "--schedule",
        str(tmp_path / "beat-schedule"),
        "-n",
        f"beat-{os.getpid()}@%h",
    ]
    log = tmp_path / "beat.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status == "queued",
            timeout=90,
            what=f"beat to re-queue the lost run (see {log})",
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    run.refresh_from_db()
    assert "worker lost" in run.error and run.attempt == 1
    assert "reaper: 1 lost run(s) re-queued" in log.read_text()
