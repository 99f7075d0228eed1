"""Step 3, before the worker starts: a clean start (earlier leftovers cancelled), then the demo
experiment defined afresh, or an interrupted one picked up with ``--resume``."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from console.demo.output import Say
from console.demo.plan import plan_candidates
from console.experiments.models import Experiment, Run
from console.experiments.runs import run_retry
from console.experiments.services import experiment_create, experiment_runs_cancel_leftover
from console.traces.models import Trace
from workers.embedded import broker_queues_pending, broker_queues_purge, embedded_queue


def demo_experiment_create(*, name: str, plan: dict[str, Any], trace: Trace, engineer) -> Experiment:
    """The demo experiment: the plan's arms on the hf engine, greedy, on the whole trace."""
    return experiment_create(
        name=name,
        trace=trace,
        engine="hf",
        target_model=plan["target"],
        baseline_engine_args=plan["engine_args"],
        candidates=plan_candidates(plan),
        load_levels=plan["loads"],
        split=plan["split"],
        output_limit=plan["output_limit"],
        sampling="greedy",
        repeats=plan["repeats"],
        warmup=1,
        hardware_label="embedded CPU",
        cost_per_hour_usd=0.10,
        created_by=engineer,
        notes=(
            f"Cut to fit a 2-core laptop in minutes: {plan['target']} "
            f"({plan['engine_args'].get('dtype')}), {trace.request_count} requests of the demo trace "
            "(train and holdout), "
            f"output limit {plan['output_limit']} tokens, {plan['repeats']} repeats, load "
            f"level(s) {plan['loads']}. Outputs this short understate what speculation does on "
            "long generations: see the fit assessment."
        ),
    )


def demo_resumable(*, name: str) -> Experiment | None:
    """The last demo experiment of this kind that started and did not finish."""
    return (
        Experiment.objects.filter(name=name)
        .exclude(status__in=[Experiment.Status.DRAFT, Experiment.Status.DONE])
        .order_by("-pk")
        .first()
    )


def demo_leftovers_cancel(*, say: Say, keep: Experiment | None) -> None:
    """A clean start: earlier experiments' unfinished runs end cancelled, their messages go.

    On the embedded default (filesystem broker, one machine) every running experiment was
    started here, and any message in the broker is a leftover, so all are cancelled and the
    broker is emptied. On a shared database and broker only earlier demos are touched.
    """
    embedded = settings.CELERY_BROKER_URL.startswith("filesystem")
    earlier = Experiment.objects.filter(status=Experiment.Status.RUNNING)
    if not embedded:
        earlier = earlier.filter(name__startswith="demo: ")
    if keep is not None:
        earlier = earlier.exclude(pk=keep.pk)
    names = dict(earlier.values_list("pk", "name"))
    cancelled = experiment_runs_cancel_leftover(
        reason="left unfinished by an earlier command; cancelled by a new demo for a clean start "
        "(`demo --resume` continues an interrupted demo instead)",
        experiment_ids=list(names),
    )
    queues = broker_queues_pending() if embedded else set()
    queues |= {embedded_queue(experiment_id=pk) for pk in cancelled}
    if keep is not None:
        queues.add(embedded_queue(experiment_id=keep.pk))  # its runs are queued afresh below
    purged = broker_queues_purge(queues=sorted(queues))
    for pk, n in sorted(cancelled.items()):
        say(f"  experiment {pk} ({names.get(pk, '?')}): {n} unfinished run(s) cancelled (left over)")
    if purged:
        say(f"  broker: {purged} pending message(s) of earlier experiments purged")


def demo_runs_resume(*, say: Say, experiment: Experiment, queue: str) -> None:
    """Queue the runs of an interrupted demo that did not finish; finished runs are kept."""
    # Runs left queued or running by a demo that died without cleaning up: nobody serves them.
    experiment_runs_cancel_leftover(reason="resumed by a new demo", experiment_ids=[experiment.pk])
    again = 0
    for run in experiment.runs.filter(status__in=[Run.Status.CANCELLED, Run.Status.FAILED]).order_by("order"):
        again += run_retry(run=run, queue=queue)
    done = experiment.runs.filter(status=Run.Status.DONE).count()
    say(f"  resuming: {done} run(s) already done are kept, {again} queued again")
