"""The worker a command starts for itself (`run_experiment --worker`, the demo): it serves that
experiment only, and it stops with the command, leaving no run ``queued`` or ``running``.

Real Postgres, Redis and Celery worker; the engine is the `openai` engine against the local
scripted streaming server (tests/support), so a run's length is known. The demo itself
(hf engine, SQLite, filesystem broker) is in tests/experiments/test_demo_interrupt.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from console.experiments.models import Experiment, Run
from console.experiments.services import experiment_create, experiment_start
from tests.conftest import ROOT, _worker_env, killed_on_exit, processes_matching, wait_for
from tests.experiments.factories import script_prompt, trace_make

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def server(openai_register):
    from tests.support.stream_server import stream_server_start

    srv = stream_server_start()
    openai_register(srv.base_url)  # before the command's worker starts: it inherits the registry
    yield srv
    srv.stop()


@pytest.fixture
def clean_broker():
    from workers.celery import app

    app.control.purge()
    yield
    app.control.purge()


def _baseline(server) -> str:
    return json.dumps(
        {
            "engine": "openai",
            "target_model": "scripted",
            "engine_args": {"base_url": server.base_url, "endpoint": "completions"},
        }
    )


def _run_experiment_with_worker(*, server, trace, tmp_path, name: str) -> subprocess.Popen:
    env = _worker_env()
    env["SPECREVIEW_VAR_DIR"] = str(tmp_path / "var")  # the worker log goes there, not in the checkout
    return subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "run_experiment",
            "--trace",
            str(trace.pk),
            "--baseline",
            _baseline(server),
            "--candidate",
            '{"method": "ngram", "num_speculative_tokens": [2]}',
            "--load",
            "1x",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--name",
            name,
            "--wait",  # implied by --worker; given for the commands before it was
            "--worker",
        ],
        cwd=ROOT,
        env=env,
        stdout=(tmp_path / f"{name}.out").open("w"),
        stderr=subprocess.STDOUT,
        preexec_fn=_default_stop_signals,
    )


def _default_stop_signals() -> None:
    """The command starts with the stop signals' default dispositions, as from a terminal: a test
    run under ``nohup`` (SIGHUP ignored) or started in the background by a non-interactive shell
    (SIGINT ignored) would hand its ignored signals down, and the command rightly keeps an
    ignored signal ignored."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def test_it_serves_its_own_experiment_and_leaves_other_queued_runs_alone(server, clean_broker, tmp_path):
    # Another experiment's runs wait in the broker (started with no worker to serve them).
    other = experiment_create(
        name="left in the queue",
        trace=trace_make(name="other", prompts=[script_prompt(tokens=3) for _ in range(2)]),
        engine="openai",
        target_model="scripted",
        baseline_engine_args={"base_url": server.base_url, "endpoint": "completions"},
        candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": [2]}}],
        load_levels="1x",
        repeats=1,
        warmup=0,
    )
    assert experiment_start(experiment=other) == 2
    trace = trace_make(name="own", prompts=[script_prompt(tokens=3) for _ in range(3)])
    proc = _run_experiment_with_worker(server=server, trace=trace, tmp_path=tmp_path, name="own")
    with killed_on_exit(proc):
        rc = proc.wait(timeout=240)
    out = (tmp_path / "own.out").read_text()
    assert rc == 0, out
    own = Experiment.objects.get(name="own")
    assert own.status == "done"
    assert set(own.runs.values_list("status", flat=True)) == {"done"}
    # The other experiment's runs were never claimed: the worker served its own queue only.
    assert list(other.runs.values_list("status", "attempt")) == [("queued", 0), ("queued", 0)]
    assert processes_matching(f"embedded-{proc.pid}@") == []


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_it_stops_its_worker_and_cancels_the_run_in_flight_when_the_command_is_stopped(
    server, clean_broker, tmp_path, sig
):
    # Three requests of 30 tokens at 0.3 s per token: a run lasts about 10 s, two runs 20 s.
    trace = trace_make(
        name="long", prompts=[script_prompt(ttft_s=0.3, gap_s=0.3, tokens=30) for _ in range(3)]
    )
    proc = _run_experiment_with_worker(server=server, trace=trace, tmp_path=tmp_path, name="long")
    with killed_on_exit(proc):
        running = wait_for(
            lambda: Run.objects.filter(
                experiment__name="long", status="running", progress_at__isnull=False
            ).first(),
            timeout=180,
            what="a run in flight",
        )
        assert processes_matching(f"embedded-{proc.pid}@"), "the worker should be running"
        t0 = time.monotonic()
        proc.send_signal(sig)
        rc = proc.wait(timeout=90)
        stopped_in = time.monotonic() - t0
    out = (tmp_path / "long.out").read_text()
    assert rc == 128 + sig, out
    assert f"interrupted ({sig.name})" in out
    assert processes_matching(f"embedded-{proc.pid}@") == [], "the worker outlived its command"
    # The run in flight stopped within a tick or two (not after its remaining requests).
    assert stopped_in < 30, f"stopping took {stopped_in:.0f} s"
    experiment = Experiment.objects.get(name="long")
    assert experiment.status == "cancelled"
    runs = {run.pk: run for run in experiment.runs.all()}
    assert {run.status for run in runs.values()} == {"cancelled"}
    assert f"run_experiment was interrupted ({sig.name})" in runs[running.pk].error
    assert all("interrupted" in run.error for run in runs.values())
