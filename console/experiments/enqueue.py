"""Work sent to the workers: a run to execute, an experiment's comparison to compute. Each is
sent by its task's registered name (``tests/workers/test_task_names.py`` keeps them) once the
surrounding transaction commits, so a worker never sees an uncommitted row and nothing in the
console imports ``workers.tasks`` (the top edge).
"""

from __future__ import annotations

import logging
import uuid

from celery import current_app
from django.db import transaction
from django.utils import timezone

from console.experiments.models import Run

log = logging.getLogger(__name__)

EXECUTE_TASK = "workers.execute_run"
COMPARISON_TASK = "workers.compute_comparison"


def run_enqueue(*, run: Run, queue: str | None = None) -> str:
    """Send the run's task once the surrounding transaction commits; returns the task id.

    ``queue`` overrides the run's own queue: a worker started for one experiment
    (``workers/embedded.py``) listens on a queue of its own, so it serves those runs only.

    A broker that refuses the message leaves the run ``queued`` with the reason in its
    error; the reaper sends it again once the broker is back.
    """
    task_id = str(uuid.uuid4())
    Run.objects.filter(pk=run.pk).update(celery_task_id=task_id, enqueued_at=timezone.now())
    run_id, queue = run.pk, queue or run.queue

    def send() -> None:
        try:
            current_app.send_task(EXECUTE_TASK, kwargs={"run_id": run_id}, queue=queue, task_id=task_id)
        except Exception as exc:
            log.exception("run %s: the broker refused its task", run_id)
            Run.objects.filter(pk=run_id, status=Run.Status.QUEUED, celery_task_id=task_id).update(
                error=f"waiting for the broker (sending the task failed: {type(exc).__name__}: {exc}); "
                "the reaper sends it again"[: Run.ERROR_MAX]
            )

    transaction.on_commit(send, robust=True)
    return task_id


def comparison_enqueue(*, experiment_id: int) -> None:
    """Ask a worker to compute the experiment's comparison once this transaction commits (the
    pages only read the stored one); at once outside a transaction. A broker that refuses is
    logged: the comparison is derived data, and the next refresh (or a user) asks again."""

    def send() -> None:
        try:
            current_app.send_task(COMPARISON_TASK, kwargs={"experiment_id": experiment_id})
        except Exception:  # derived data: see the docstring
            log.exception("experiment %s: could not ask for its comparison", experiment_id)

    transaction.on_commit(send, robust=True)
