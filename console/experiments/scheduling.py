"""How an experiment's runs are released to the workers: the matrix's interleaving, kept true
with many workers.

The matrix interleaves arms (each repeat runs every arm in the stored order), so that drift over
time (thermals, a neighbour's load, a server's cache) hits every arm alike. That holds only while
the runs execute one after another. With several workers on one queue (one per GPU, as
docs/gpu-workers.md has it), ``parallel`` (the default) lets runs of different arms execute at the
same time on different workers and hardware, so the interleaving no longer says what it claims.

``lockstep`` keeps it: at most one run of the experiment is released at a time, in the matrix
order; the next is sent when the previous one ends (done, failed or cancelled), whichever worker
takes it. The price is the parallelism across workers within one experiment (other experiments
still use the other workers); with one worker per queue the two modes run alike. Chosen over
"one worker per block" because it needs no per-worker queues and survives a worker lost
mid-experiment (the reaper re-sends the run in flight, and nothing waits on a dead worker's queue).

A run released here is a queued run whose task id is set (``run_enqueue`` sets it); a queued run
without one has not been released yet, and the reaper leaves it alone. Capacity-search steps and
a user's rerun are sent as they are made, in either mode. An experiment started on an embedded
worker's own queue (one worker: the demo, ``run_experiment``) is released at once.
"""

from __future__ import annotations

from django.db import transaction

from console.experiments.enqueue import run_enqueue
from console.experiments.models import Experiment, Run

PARALLEL = "parallel"
LOCKSTEP = "lockstep"
SCHEDULING = (PARALLEL, LOCKSTEP)


def scheduling_check(value: str, *, errors: dict[str, list[str]]) -> None:
    """Say under ``errors["scheduling"]`` why ``value`` is not a scheduling mode, if it is not."""
    if value not in SCHEDULING:
        errors.setdefault("scheduling", []).append(
            "scheduling must be 'parallel' (every run released at once) or 'lockstep' (one at a time, "
            f"in matrix order), got {value!r}"
        )


def lockstep_release(*, experiment_id: int) -> int:
    """Send the next run of a running ``lockstep`` experiment when none is in flight; returns
    how many were sent (0 or 1). Called when a run ends and by the reaper; a no-op otherwise."""
    with transaction.atomic():
        experiment = (
            Experiment.objects.select_for_update()
            .filter(pk=experiment_id, status=Experiment.Status.RUNNING, scheduling=LOCKSTEP)
            .first()
        )
        if experiment is None:
            return 0
        runs = Run.objects.filter(experiment_id=experiment_id)
        in_flight = runs.filter(status=Run.Status.RUNNING).exists() or (
            runs.filter(status=Run.Status.QUEUED).exclude(celery_task_id="").exists()
        )
        if in_flight:
            return 0
        nxt = runs.filter(status=Run.Status.QUEUED, celery_task_id="", cancel_requested=False).order_by("order").first()
        if nxt is None:
            return 0
        run_enqueue(run=nxt)
        return 1
