"""Thin tasks: take ids, refetch rows, call one service, own only the retry policy."""

from __future__ import annotations

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from workers.engines import EngineError


@shared_task(name="workers.ping", soft_time_limit=30, time_limit=60)
def ping(*, note: str) -> str:
    """Write a heartbeat row so a caller can see a real worker reached the database."""
    from console.accounts.services import heartbeat_record

    return str(heartbeat_record(note=note).pk)


@shared_task(
    bind=True,
    name="workers.execute_run",
    # Idempotent (claimed with a conditional UPDATE, old rows replaced), so a task lost with
    # its worker may be redelivered safely.
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=settings.CELERY_TASK_SOFT_TIME_LIMIT,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
    max_retries=3,
)
def execute_run(self, *, run_id: int) -> str:
    from workers.execution import run_execute, run_fail_if_stuck

    try:
        return run_execute(run_id=run_id)
    except EngineError as exc:  # only transient ones escape run_execute
        raise self.retry(exc=exc, countdown=min(60, 5 * 2**self.request.retries)) from exc
    except SoftTimeLimitExceeded:
        run_fail_if_stuck(
            run_id=run_id,
            message=f"stopped at the soft time limit ({settings.CELERY_TASK_SOFT_TIME_LIMIT} s); "
            "raise SPECREVIEW_RUN_SOFT_TIME_LIMIT or shorten the trace",
        )
        return "failed"
