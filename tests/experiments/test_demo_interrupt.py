"""The demo survives being stopped: no worker left behind, no run left ``running``, and the
next demo starts clean (earlier leftovers cancelled and said so) and reaches its own first run
within a minute.

This runs the demo as a new user would, on the embedded default (SQLite and the filesystem
broker under an isolated SPECREVIEW_VAR_DIR, a worker the demo starts itself, the hf engine
on SmolLM2-135M), cut to its smallest size with the demo's hidden testing options.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, killed_on_exit, processes_matching, wait_for

pytestmark = [pytest.mark.model, pytest.mark.worker, pytest.mark.slow]

# One request of 4 tokens, one load level, one repeat, baseline and n-gram k=2: two short runs.
SMALLEST = ["--no-serve", "--limit-requests", "1", "--output-limit", "4"]
SMALLEST += ["--loads", "8x", "--ngram-k", "2", "--repeats", "1"]


def _embedded_env(var_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(SPECREVIEW_VAR_DIR=str(var_dir), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def _manage(args: list[str], *, env: dict, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        stdout=out.open("w"),
        stderr=subprocess.STDOUT,
    )


def _query(db: Path, sql: str, *params) -> list[tuple]:
    connection = sqlite3.connect(db, timeout=30)
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.close()


def _runs(db: Path, experiment_id: int) -> list[tuple]:
    return _query(
        db,
        "SELECT id, status, error, started_at, attempt FROM experiments_run WHERE experiment_id = ? ORDER BY id",
        experiment_id,
    )


def test_an_interrupted_demo_stops_its_worker_and_the_next_demo_starts_clean(tmp_path):
    var = tmp_path / "var"
    env = _embedded_env(var)
    db = var / "specreview.sqlite3"
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrate.returncode == 0, migrate.stderr

    # 1. The demo, stopped mid-run as `kill` (or a closed terminal, or Ctrl-C) would.
    first = _manage(["demo", *SMALLEST], env=env, out=tmp_path / "first.out")
    with killed_on_exit(first):
        def in_flight():
            assert first.poll() is None, "the demo ended before a run could be interrupted"
            return (
                db.exists()
                and _query(
                    # claimed and beating (from its model load on): with one 4-token request a
                    # run's first progress mark is also its last, too late to interrupt it
                    db, "SELECT id FROM experiments_run WHERE status = 'running' AND heartbeat_at IS NOT NULL"
                )
            )

        wait_for(in_flight, timeout=600, interval=0.2, what="a demo run in flight")
        assert processes_matching(f"embedded-{first.pid}@"), "the demo should have started its worker"
        first.send_signal(signal.SIGTERM)
        rc = first.wait(timeout=180)
    out = (tmp_path / "first.out").read_text()
    assert rc == 128 + signal.SIGTERM, out
    assert "interrupted (SIGTERM)" in out
    assert processes_matching(f"embedded-{first.pid}@") == [], "the demo's worker outlived it"
    [(interrupted_id, status)] = _query(db, "SELECT id, status FROM experiments_experiment")
    assert status == "cancelled"
    runs = _runs(db, interrupted_id)
    assert {status for _, status, *_ in runs} == {"cancelled"}, runs
    assert all("the demo was interrupted (SIGTERM)" in error for _, _, error, *_ in runs), runs

    # 2. What an older demo (or a console with no worker) leaves behind: an experiment started
    # with nothing to serve it, its runs queued and its messages in the embedded broker.
    leftover = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "run_experiment",
            "--trace",
            "1",
            "--baseline",
            json.dumps({"engine": "hf", "target_model": "smollm2-135m", "engine_args": {"dtype": "float32"}}),
            "--candidate",
            '{"method": "ngram", "num_speculative_tokens": [2]}',
            "--repeats",
            "1",
            "--name",
            "left over",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert leftover.returncode == 0, leftover.stdout + leftover.stderr
    [(leftover_id,)] = _query(db, "SELECT id FROM experiments_experiment WHERE name = 'left over'")
    assert list((var / "broker" / "in").glob("*.cpu.msg")), "the leftover's messages should be queued"

    # 3. A new quick demo: a clean start that reaches its own first run within a minute.
    t0 = time.monotonic()
    second = _manage(["demo", *SMALLEST], env=env, out=tmp_path / "second.out")
    with killed_on_exit(second):

        def own_run_started():
            rows = _query(
                db,
                "SELECT r.id FROM experiments_run r JOIN experiments_experiment e ON e.id = r.experiment_id "
                "WHERE e.id > ? AND e.name LIKE 'demo:%' AND r.started_at IS NOT NULL",
                leftover_id,
            )
            return rows or (second.poll() is not None and "exited")

        assert (
            wait_for(own_run_started, timeout=120, interval=0.5, what="the new demo's first run") != "exited"
        )
        first_run_s = time.monotonic() - t0
        rc = second.wait(timeout=1500)
    out = (tmp_path / "second.out").read_text()
    assert rc == 0, out
    print(f"the new demo's first run started {first_run_s:.1f} s after the demo")
    assert first_run_s < 60, f"the new demo's first run started after {first_run_s:.0f} s"
    assert "4/6 summary" in out and "6/6 decision" in out and "time budget" in out
    # One request is in one split only: the demo says why it has no policy, and still drafts.
    assert "no policy: " in out
    assert f"experiment {leftover_id} (left over): 2 unfinished run(s) cancelled" in out
    assert "pending message(s) of earlier experiments purged" in out
    leftover_runs = _runs(db, leftover_id)
    assert [(status, attempt) for _, status, _, _, attempt in leftover_runs] == [("cancelled", 0)] * 2
    assert all("cancelled by a new demo" in error for _, _, error, *_ in leftover_runs)
    [(new_id, new_status)] = _query(
        db, "SELECT id, status FROM experiments_experiment WHERE id > ?", leftover_id
    )
    assert new_status == "done"
    assert {status for _, status, *_ in _runs(db, new_id)} == {"done"}
    assert processes_matching(f"embedded-{second.pid}@") == []
    assert not list((var / "broker" / "in").glob("*.msg")), "no message should be left in the broker"
