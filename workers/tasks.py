"""Thin tasks: take ids, refetch rows, call one service, own only the retry policy."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from console.analysis.retention import raw_text_purge_due
from console.analysis.sequential_looks import experiment_sequential_advance
from console.analysis.services import comparison_refresh
from console.experiments.runs import runs_reap as reap
from console.experiments.worker_ping import worker_heartbeat_record
from console.notify import deliver as notifications_deliver
from console.rollouts.evaluation import rollouts_evaluate_due
from workers.engines import EngineError
from workers.execution import run_execute


@shared_task(name="workers.ping", soft_time_limit=30, time_limit=60)
def ping(*, note: str) -> str:
    """Write a heartbeat row so a caller can see a real worker reached the database."""
    return str(worker_heartbeat_record(note=note).pk)


@shared_task(
    name="workers.compute_comparison",
    # Idempotent: it stores the comparison of the runs finished now, or does nothing when the
    # stored one is current.
    acks_late=True,
    soft_time_limit=1800,
    time_limit=1900,
)
def compute_comparison(*, experiment_id: int) -> str:
    if comparison_refresh(experiment_id=experiment_id) is None:
        return "no baseline"
    # Run until decided: look at the refreshed comparison, then stop or add a repeat (conditional
    # writes keyed on the repeat count: a redelivered or concurrent task adds nothing twice).
    return f"computed; {experiment_sequential_advance(experiment_id=experiment_id)}"


@shared_task(
    bind=True,
    name="workers.execute_run",
    # Idempotent: claimed with a conditional UPDATE that draws an attempt token, every write
    # keyed on it, old rows replaced in one transaction. A task lost with its worker may be
    # redelivered safely: it finds nothing to claim, or a re-queued run to run again.
    acks_late=True,
    reject_on_worker_lost=True,
    # Prefork pools enforce these; a solo pool (GPU, embedded) does not, so the replay
    # enforces the run's own deadline too (workers/execution.py).
    soft_time_limit=settings.CELERY_TASK_SOFT_TIME_LIMIT,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
    max_retries=settings.SPECREVIEW_RUN_MAX_ATTEMPTS,
)
def execute_run(self, *, run_id: int) -> str:
    try:
        return run_execute(run_id=run_id)
    except EngineError as exc:  # only transient ones escape, the run already back in `queued`
        raise self.retry(exc=exc, countdown=min(60, 5 * 2**self.request.retries)) from exc


@shared_task(
    name="workers.runs_reap",
    soft_time_limit=120,
    time_limit=180,
    # A beat tick nobody picked up is replaced by the next one.
    expires=settings.SPECREVIEW_REAP_EVERY_S,
)
def runs_reap() -> str:
    """Re-queue or fail runs whose worker stopped beating; re-send queued runs the broker lost."""
    return str(reap())


@shared_task(
    bind=True,
    name="workers.notify",
    soft_time_limit=120,
    time_limit=180,
    max_retries=settings.SPECREVIEW_NOTIFY_RETRIES,
)
def notify(self, *, payload: dict, only: list[str] | None = None) -> str:
    """Deliver a notification (``console.notify``; made by ``decisions.notifications``); the targets that failed are
    tried again, alone, after 1x, 2x, 4x... ``SPECREVIEW_NOTIFY_RETRY_S`` (at most an hour apart)."""
    failed = notifications_deliver(payload, only=only)
    if failed:
        countdown = min(3600, settings.SPECREVIEW_NOTIFY_RETRY_S * 2**self.request.retries)
        raise self.retry(kwargs={"payload": payload, "only": failed}, countdown=countdown)
    return f"delivered {payload['delivery']}"


@shared_task(
    name="workers.raw_text_purge",
    soft_time_limit=3600,
    time_limit=3700,
    # Idempotent (a purged trace is marked and skipped); a missed daily tick waits for the next.
    expires=settings.SPECREVIEW_RETENTION_PURGE_EVERY_S,
)
def raw_text_purge() -> str:
    """Purge the raw text of traces past their retention period (``analysis.retention``)."""
    return str(len(raw_text_purge_due(actor="task workers.raw_text_purge")))


@shared_task(
    name="workers.rollouts_evaluate",
    soft_time_limit=300,
    time_limit=360,
    # Looks are taken at their own window's end whenever they run: a tick nobody picked up is
    # replaced by the next one, which takes the looks it would have.
    expires=settings.SPECREVIEW_ROLLOUT_EVALUATE_EVERY_S,
)
def rollouts_evaluate() -> str:
    """Look at every running rollout's due triggers (``rollouts.evaluation``)."""
    return str(rollouts_evaluate_due())
