"""The demo tells the whole story: train and holdout results, at least two repeats (a noise
floor), the fit assessment, a fitted slice policy and a decision waiting for the approver, then
a time budget that adds up.

Runs the demo as `make demo` would (embedded default: SQLite and the filesystem broker under an
isolated SPECREVIEW_VAR_DIR, a worker the demo starts itself, the hf engine on SmolLM2-135M),
cut with its hidden testing options to 6 requests of 4 tokens (3 train, 3 holdout), baseline and n-gram k=2, two
repeats: four short runs.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.experiments.test_demo_interrupt import _embedded_env

pytestmark = [pytest.mark.model, pytest.mark.worker, pytest.mark.slow]

SMALL = ["--no-serve", "--limit-requests", "6", "--output-limit", "4", "--loads", "8x", "--ngram-k", "2"]
BUDGET_LINES = (
    "install (before the demo)",
    "model fetch",
    "model load",
    "warm-up and setup",
    "prefill",
    "decode",
    "idle",
    "other",
    "total",
)


def _query(db, sql: str, *params) -> list[tuple]:
    connection = sqlite3.connect(db, timeout=30)
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    env = _embedded_env(tmp / "var")
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrate.returncode == 0, migrate.stderr
    # What `make demo` passes: the time it started, 42 s before this command (its install).
    env["SPECREVIEW_DEMO_T0"] = str(time.time() - 42)
    demo = subprocess.run(
        [sys.executable, "manage.py", "demo", *SMALL],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    return demo.stdout, tmp / "var" / "specreview.sqlite3"


def test_the_demo_runs_train_and_holdout_twice(demo_run):
    _, db = demo_run
    [(experiment_id, status, split, repeats)] = _query(
        db, "SELECT id, status, split, repeats FROM experiments_experiment"
    )
    assert (status, split) == ("done", "all")
    assert repeats >= 2
    runs = _query(db, "SELECT status, repeat FROM experiments_run WHERE experiment_id = ?", experiment_id)
    assert {s for s, _ in runs} == {"done"}
    assert len({r for _, r in runs}) >= 2, runs
    splits = _query(
        db,
        "SELECT DISTINCT t.split FROM analysis_requestresult r "
        "JOIN traces_tracerequest t ON t.id = r.trace_request_id",
    )
    assert {s for (s,) in splits} == {"train", "holdout"}


def test_the_demo_prints_a_noise_floor_and_the_fit_assessment(demo_run):
    out, _ = demo_run
    assert re.search(
        r"noise floor \(A/A, baseline repeat against repeat\) at 8x: TPOT p50 .* over 2 repeats", out
    ), out
    assert "fit assessment (after 2 baseline run(s))" in out, out


def test_the_demo_fits_a_policy_and_submits_a_decision_for_the_approver(demo_run):
    out, db = demo_run
    [(experiment_id,)] = _query(db, "SELECT id FROM experiments_experiment")
    policies = _query(
        db,
        "SELECT id, train_scores, holdout_scores FROM policies_slicepolicy WHERE experiment_id = ?",
        experiment_id,
    )
    assert len(policies) == 1, out
    [(decision_id, status, proposal, owner, triggers, author)] = _query(
        db,
        "SELECT d.id, d.status, d.proposal, d.rollback_owner, d.rollback_triggers, u.username "
        "FROM decisions_decision d JOIN auth_user u ON u.id = d.created_by_id WHERE d.experiment_id = ?",
        experiment_id,
    )
    assert status == "submitted", out
    assert author == "demo-engineer"
    assert owner and triggers not in ("", "[]")
    assert proposal in ("enable_for_slice", "keep_off")
    assert f"decision {decision_id}: " in out and "waiting for the approver" in out
    # The approver the demo prints exists and may sign it: the demo's team has its three users, and
    # owns the trace the decision was drafted from.
    members = _query(
        db,
        "SELECT u.username, m.role, t.name FROM accounts_membership m JOIN auth_user u ON u.id = m.user_id "
        "JOIN accounts_team t ON t.id = m.team_id",
    )
    expected = {("demo", "approver"), ("demo-engineer", "engineer"), ("demo-viewer", "viewer")}
    assert {(u, r) for u, r, t in members if t == "demo"} == expected
    [(owner_team,)] = _query(
        db,
        "SELECT t.name FROM experiments_experiment e JOIN traces_trace tr ON tr.id = e.trace_id "
        "JOIN accounts_team t ON t.id = tr.team_id WHERE e.id = ?",
        experiment_id,
    )
    assert owner_team == "demo"


def test_the_demo_prints_a_time_budget_that_adds_up(demo_run):
    out, _ = demo_run
    block = out[out.index("time budget") :]
    seconds = {}
    for label in BUDGET_LINES:
        match = re.search(rf"^  {re.escape(label)}\s+(\d+) s", block, re.MULTILINE)
        assert match, f"no budget line {label!r} in:\n{block}"
        seconds[label] = int(match.group(1))
    assert seconds["install (before the demo)"] in range(42, 42 + 120)  # from SPECREVIEW_DEMO_T0
    assert seconds["decode"] > 0 and seconds["model load"] >= 0
    parts = sum(v for k, v in seconds.items() if k != "total")
    assert abs(parts - seconds["total"]) <= len(BUDGET_LINES), seconds  # rounding of each line


def test_every_trigger_of_the_demo_decision_is_evaluated_by_a_real_prometheus(demo_run):
    """The demo's decision drafts its rollback triggers from its evidence: each one's query, run on
    each pool it compares, gives a number from a real Prometheus scraping vLLM's metric names."""
    import json
    import math

    from console.decisions.triggers import trigger_problems
    from console.rollouts.prometheus import instant_query, query_render
    from tests.support.prometheus import drifting_metrics, prometheus_server, prometheus_wait

    out, db = demo_run
    [(raw,)] = _query(db, "SELECT rollback_triggers FROM decisions_decision")
    triggers = json.loads(raw)
    assert triggers and all(t.get("query") and not trigger_problems(t) for t in triggers), triggers
    with drifting_metrics(seed=3) as metrics, prometheus_server(targets=[metrics.target]) as url:
        prometheus_wait(lambda: (instant_query(url=url, query="count(vllm:num_preemptions_total)") or 0) >= 2)
        time.sleep(3)  # a few scrapes, so rate() over the window has points
        for trigger in triggers:
            pools = ("candidate", "baseline") if trigger["compare"] == "control" else ("candidate",)
            for pool in pools:
                query = query_render(trigger["query"], pool=f'pool="{pool}"', window_min=trigger["window_min"])
                value = instant_query(url=url, query=query)
                assert value is not None and math.isfinite(value), (trigger["metric"], pool, query)
