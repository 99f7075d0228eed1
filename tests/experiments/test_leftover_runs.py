"""Runs left unfinished by an interrupted command end ``cancelled`` with the reason.

``experiment_runs_cancel_leftover`` is what the demo and the embedded worker call on the way
out (and the demo at start, for earlier experiments' leftovers). The end-to-end behaviour,
with a real worker, is in tests/workers/test_embedded.py and test_demo_interrupt.py.
"""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from console.experiments.models import Experiment, Run
from console.experiments.services import experiment_create, experiment_runs_cancel_leftover
from tests.experiments.factories import script_prompt, trace_make

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _server(openai_register):
    openai_register("http://127.0.0.1:9")  # never reached: these runs are only cancelled


def _experiment(name: str, *, status: str = "running") -> Experiment:
    experiment = experiment_create(
        name=name,
        trace=trace_make(name=name, prompts=[script_prompt(tokens=2)]),
        engine="openai",
        target_model="scripted",
        baseline_engine_args={"base_url": "http://127.0.0.1:9", "endpoint": "completions"},
        candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": [2, 4]}}],
        load_levels="1x",
        repeats=1,
        warmup=0,
    )
    Experiment.objects.filter(pk=experiment.pk).update(status=status)
    return experiment


def _statuses(experiment: Experiment) -> list[tuple[str, bool, str]]:
    return list(experiment.runs.order_by("order").values_list("status", "cancel_requested", "error"))


def test_it_cancels_queued_and_running_runs_with_the_reason():
    experiment = _experiment("interrupted")
    done, running, queued = experiment.runs.order_by("order")
    Run.objects.filter(pk=done.pk).update(status="done")
    Run.objects.filter(pk=running.pk).update(status="running")

    assert experiment_runs_cancel_leftover(reason="demo interrupted") == {experiment.pk: 2}

    assert _statuses(experiment) == [
        ("done", False, ""),
        ("cancelled", True, "demo interrupted"),
        ("cancelled", True, "demo interrupted"),
    ]
    experiment.refresh_from_db()
    assert experiment.status == "cancelled" and experiment.finished_at is not None


def test_it_only_asks_a_running_run_to_stop_when_its_worker_may_still_end_it():
    experiment = _experiment("stopping")
    running, queued, _ = experiment.runs.order_by("order")
    Run.objects.filter(pk=running.pk).update(status="running")

    counts = experiment_runs_cancel_leftover(
        reason="the demo was interrupted", experiment_ids=[experiment.pk], stop_running=False
    )

    assert counts == {experiment.pk: 3}
    assert _statuses(experiment) == [
        ("running", True, "the demo was interrupted"),
        ("cancelled", True, "the demo was interrupted"),
        ("cancelled", True, "the demo was interrupted"),
    ]
    # A second request (the worker's own shutdown hook) keeps the first reason.
    experiment_runs_cancel_leftover(
        reason="worker stopped", experiment_ids=[experiment.pk], stop_running=False
    )
    assert Run.objects.get(pk=running.pk).error == "the demo was interrupted"
    assert Experiment.objects.get(pk=experiment.pk).status == "running"


def test_it_leaves_drafts_finished_experiments_and_other_experiments_alone():
    draft = _experiment("draft", status="draft")
    finished = _experiment("finished", status="done")
    other = _experiment("other")
    target = _experiment("target")

    assert experiment_runs_cancel_leftover(reason="r", experiment_ids=[target.pk, draft.pk, finished.pk]) == {
        target.pk: 3
    }

    for untouched in (draft, finished, other):
        assert {status for status, _, _ in _statuses(untouched)} == {"queued"}


def test_the_demo_refuses_to_resume_when_no_demo_was_interrupted():
    _experiment("demo: smollm2-135m", status="done")  # finished: nothing to resume

    with pytest.raises(CommandError, match="--resume: no interrupted 'demo: smollm2-135m'"):
        call_command("demo", "--resume", "--no-serve")


def test_the_full_demo_refuses_quick_too():
    with pytest.raises(CommandError, match="--full and --quick: choose one"):
        call_command("demo", "--full", "--quick", "--no-serve")
