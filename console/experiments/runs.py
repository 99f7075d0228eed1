"""A run's life: claim, heartbeat, finish, fail, cancel, retry, reap (its task is sent by
``enqueue.py``).

Every write here is a conditional UPDATE keyed on the run's id, its status and, once a
worker holds it, the attempt token its claim drew. A worker that lost its claim (the
reaper gave the run to another attempt, or a user cancelled it) matches no row, so it
stops and writes nothing. Postgres is the source of truth: the broker only carries run
ids, and the reaper re-sends any queued run whose message the broker no longer holds.

Used by the worker (``workers/execution.py``), the console (``services.py``, views) and the
periodic reaper (Celery beat, or the embedded worker's timer). Nothing here imports
``workers``: tasks are sent by name. What a run stores belongs to ``console.results``, above
this module: the worker stores a finished run's results through
``console.results.services.results_store`` (which calls :func:`run_finish`), and the results
an ended attempt leaves are discarded through ``hooks.py``.
"""

from __future__ import annotations

import datetime
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from console.experiments.capacity_search import capacity_searches_advance
from console.experiments.enqueue import comparison_enqueue, run_enqueue
from console.experiments.hooks import run_finished_notify, run_results_discard
from console.experiments.models import Experiment, Run
from console.experiments.scheduling import LOCKSTEP, lockstep_release

log = logging.getLogger(__name__)


# --- retry (its task is sent by ``enqueue.py``) ----------------------------------------------


@transaction.atomic
def run_retry(*, run: Run, queue: str | None = None) -> bool:
    """Queue a failed or cancelled run again; its old results are replaced when it runs
    (``queue`` as in ``enqueue.run_enqueue``)."""
    updated = Run.objects.filter(pk=run.pk, status__in=[Run.Status.FAILED, Run.Status.CANCELLED]).update(
        status=Run.Status.QUEUED,
        error="",
        cancel_requested=False,
        progress_done=0,
        progress_at=None,
        heartbeat_at=None,
        attempt_token="",
        finished_at=None,
    )
    if not updated:
        return False
    Experiment.objects.filter(pk=run.experiment_id).update(status=Experiment.Status.RUNNING, finished_at=None)
    run.refresh_from_db()
    run_enqueue(run=run, queue=queue)
    return True


# --- the worker's side -----------------------------------------------------------------------


def run_claim(*, run_id: int, worker: str) -> str | None:
    """queued -> running, once. Returns the attempt token, or None when there was nothing to
    claim (a redelivered, duplicate or revoked task). The heartbeat starts at the claim."""
    token = uuid.uuid4().hex
    now = timezone.now()
    claimed = Run.objects.filter(pk=run_id, status=Run.Status.QUEUED, cancel_requested=False).update(
        status=Run.Status.RUNNING,
        attempt_token=token,
        heartbeat_at=now,
        started_at=now,
        finished_at=None,
        worker=worker[:200],
        attempt=F("attempt") + 1,
        progress_done=0,
        progress_at=None,
        error="",
    )
    return token if claimed else None


def _held(run_id: int, token: str):
    return Run.objects.filter(pk=run_id, status=Run.Status.RUNNING, attempt_token=token)


def run_heartbeat(*, run_id: int, token: str, done: int | None = None, total: int | None = None) -> str:
    """Record that the claim's holder is alive (and its progress, in requests).

    Returns ``"ok"``, ``"cancel"`` (a user asked the run to stop) or ``"lost"`` (the claim
    is no longer this worker's: stop and write nothing).
    """
    now = timezone.now()
    fields: dict[str, Any] = {"heartbeat_at": now}
    if done is not None:
        fields.update(progress_done=done, progress_at=now)
    if total is not None:
        fields["progress_total"] = total
    if not _held(run_id, token).update(**fields):
        return "lost"
    return "cancel" if _held(run_id, token).filter(cancel_requested=True).exists() else "ok"


def run_update(*, run_id: int, token: str, **fields: Any) -> bool:
    """Set descriptive fields (versions, hardware, totals) while the claim is held."""
    return bool(_held(run_id, token).update(**fields))


def run_finish(
    *,
    run_id: int,
    token: str,
    store: Callable[[], int],
    wall_s: float,
    error: str = "",
) -> bool:
    """Mark a run done with its results, in one transaction, only while the claim is held: a
    worker that lost it writes nothing. ``store()`` writes the results (replacing a rerun's old
    ones) and returns how many requests they hold; it is ``console.results.services.results_store``
    that the worker calls, and that calls this. Once committed, the apps above derive what they
    cache from the results (``hooks.run_finished_notify``) and the experiment's status is
    refreshed. Returns False (nothing written) when the claim was lost.
    """
    with transaction.atomic():
        # The row lock makes the reaper and a cancel wait for this write, then find it done.
        if not _held(run_id, token).select_for_update().exists():
            return False
        stored = store()
        _held(run_id, token).update(
            status=Run.Status.DONE,
            finished_at=timezone.now(),
            heartbeat_at=timezone.now(),
            wall_s=wall_s,
            progress_done=stored,
            error=error[: Run.ERROR_MAX],
        )
    run_finished_notify(run_id=run_id)
    _experiment_refresh_for(run_id)
    return True


def run_fail(*, run_id: int, token: str, message: str, retry: bool = False) -> bool:
    """End the claim: ``failed`` with ``message``, or back to ``queued`` (``retry``: the task
    sends itself again). Partial results are deleted. False when the claim was lost."""
    with transaction.atomic():
        if not _held(run_id, token).select_for_update().exists():
            return False
        run_results_discard(run_id=run_id)
        if retry:
            _held(run_id, token).update(
                status=Run.Status.QUEUED,
                attempt_token="",
                heartbeat_at=None,
                enqueued_at=timezone.now(),
                error=f"retrying: {message}"[: Run.ERROR_MAX],
            )
        else:
            _held(run_id, token).update(
                status=Run.Status.FAILED, finished_at=timezone.now(), error=message[: Run.ERROR_MAX]
            )
    if not retry:
        _experiment_refresh_for(run_id)
    return True


def run_cancel(*, run_id: int, token: str) -> bool:
    """The worker stopped at a user's request: ``cancelled``, its partial results deleted."""
    with transaction.atomic():
        if not _held(run_id, token).select_for_update().exists():
            return False
        run_results_discard(run_id=run_id)
        _held(run_id, token).update(status=Run.Status.CANCELLED, finished_at=timezone.now())
    _experiment_refresh_for(run_id)
    return True


def _experiment_refresh_for(run_id: int) -> None:
    experiment_id = Run.objects.filter(pk=run_id).values_list("experiment_id", flat=True).first()
    if experiment_id is not None:
        experiment_status_refresh(experiment_id=experiment_id)


def experiment_status_refresh(*, experiment_id: int) -> str:
    """Derive the experiment's status from its runs once none is left to run. A capacity
    search's next step is added first (``capacity_search.capacity_searches_advance``): the
    experiment is done only once every search has ended."""
    try:
        capacity_searches_advance(experiment_id=experiment_id)
    except Exception:  # the next refresh (the reaper's, at the latest) tries again
        log.exception("experiment %s: could not advance its capacity searches", experiment_id)
    lockstep_release(experiment_id=experiment_id)  # a lockstep experiment's next run, if none is in flight
    statuses = set(Run.objects.filter(experiment_id=experiment_id).values_list("status", flat=True))
    if statuses & {Run.Status.QUEUED, Run.Status.RUNNING}:
        return Experiment.Status.RUNNING
    if Run.Status.FAILED in statuses:
        status = Experiment.Status.FAILED
    elif Run.Status.CANCELLED in statuses:
        status = Experiment.Status.CANCELLED
    else:
        status = Experiment.Status.DONE
    Experiment.objects.filter(pk=experiment_id).exclude(status=status).update(
        status=status, finished_at=timezone.now()
    )
    if Run.objects.filter(
        experiment_id=experiment_id, status=Run.Status.DONE, arm__is_baseline=True
    ).exists():
        comparison_enqueue(experiment_id=experiment_id)
    return status


# --- the reaper ------------------------------------------------------------------------------


@dataclass
class ReapReport:
    requeued: list[int] = field(default_factory=list)  # lost with their worker, sent again
    failed: list[int] = field(default_factory=list)  # lost on their last attempt
    cancelled: list[int] = field(default_factory=list)  # lost while a cancel was pending
    resent: list[int] = field(default_factory=list)  # queued, but the broker had no message
    broker_error: str = ""

    @property
    def total(self) -> int:
        return len(self.requeued) + len(self.failed) + len(self.cancelled) + len(self.resent)

    def __str__(self) -> str:
        text = (
            f"{len(self.requeued)} lost run(s) re-queued, {len(self.failed)} failed, "
            f"{len(self.cancelled)} cancelled; {len(self.resent)} queued run(s) sent again"
        )
        return text + (f" (broker: {self.broker_error})" if self.broker_error else "")


def runs_reap(
    *,
    stale_after_s: float | None = None,
    resend_after_s: float | None = None,
    max_attempts: int | None = None,
) -> ReapReport:
    """End runs whose worker stopped beating, and re-send queued runs the broker lost.

    A ``running`` run without a heartbeat for ``stale_after_s`` seconds lost its worker: it
    is re-queued (a new attempt) while it has had fewer than ``max_attempts``, failed with
    "worker lost" after that, and cancelled when a cancel was pending. A ``queued`` run of a
    running experiment whose task the broker no longer holds, sent more than
    ``resend_after_s`` seconds ago, is sent again (Postgres is the source of truth). Safe to
    run from several places at once: every change is a conditional UPDATE.
    """
    stale_after_s = float(settings.SPECREVIEW_RUN_STALE_AFTER_S if stale_after_s is None else stale_after_s)
    resend_after_s = stale_after_s if resend_after_s is None else float(resend_after_s)
    max_attempts = settings.SPECREVIEW_RUN_MAX_ATTEMPTS if max_attempts is None else max_attempts
    report = ReapReport()
    now = timezone.now()
    cutoff = now - datetime.timedelta(seconds=stale_after_s)
    stale = Run.objects.filter(status=Run.Status.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )
    experiments: set[int] = set()
    for run in stale.only("pk", "attempt", "attempt_token", "cancel_requested", "experiment_id", "queue"):
        lost = _held(run.pk, run.attempt_token).filter(
            Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
        )
        silence = f"no heartbeat for more than {stale_after_s:.0f} s"
        with transaction.atomic():
            if run.cancel_requested:
                if lost.update(status=Run.Status.CANCELLED, finished_at=now, attempt_token=""):
                    run_results_discard(run_id=run.pk)
                    report.cancelled.append(run.pk)
            elif run.attempt < max_attempts:
                if lost.update(
                    status=Run.Status.QUEUED,
                    attempt_token="",
                    heartbeat_at=None,
                    error=f"worker lost ({silence}) on attempt {run.attempt}; re-queued",
                ):
                    run_results_discard(run_id=run.pk)
                    run_enqueue(run=run)
                    report.requeued.append(run.pk)
            elif lost.update(
                status=Run.Status.FAILED,
                finished_at=now,
                attempt_token="",
                error=f"worker lost ({silence}) on attempt {run.attempt} of {max_attempts}; retry the run",
            ):
                run_results_discard(run_id=run.pk)
                report.failed.append(run.pk)
        experiments.add(run.experiment_id)
    _queued_resend(report=report, older_than=now - datetime.timedelta(seconds=resend_after_s))
    for experiment_id in experiments:
        experiment_status_refresh(experiment_id=experiment_id)
    if report.total:
        log.warning("reaper: %s", report)
    return report


def _queued_resend(*, report: ReapReport, older_than: datetime.datetime) -> None:
    waiting = list(
        Run.objects.filter(
            status=Run.Status.QUEUED,
            cancel_requested=False,
            experiment__status=Experiment.Status.RUNNING,
        )
        .filter(Q(enqueued_at__lt=older_than) | Q(enqueued_at__isnull=True))
        # a lockstep experiment's runs not yet released wait for their turn, not for the broker
        .exclude(experiment__scheduling=LOCKSTEP, celery_task_id="")
        .only("pk", "celery_task_id", "queue")
    )
    if not waiting:
        return
    try:
        held = broker_task_ids(queues={r.queue for r in waiting})
    except Exception as exc:  # the broker is down: nothing can be sent now anyway
        report.broker_error = f"{type(exc).__name__}: {exc}"
        return
    if held is None:
        report.broker_error = "this broker cannot be inspected; queued runs are not re-sent"
        return
    for run in waiting:
        if run.celery_task_id in held:
            continue
        # Keyed on the task id it had: a concurrent reaper or a retry already re-sent it.
        with transaction.atomic():
            if Run.objects.filter(
                pk=run.pk, status=Run.Status.QUEUED, celery_task_id=run.celery_task_id
            ).update(enqueued_at=timezone.now()):
                run_enqueue(run=run)
                report.resent.append(run.pk)


def broker_task_ids(*, queues: set[str]) -> set[str] | None:
    """Ids of the tasks the broker holds for ``queues``: waiting, or delivered and not yet
    acknowledged. None for a transport that cannot be inspected (only Redis and the
    filesystem transport can)."""
    with current_app.connection_for_write() as conn:
        transport = conn.transport.driver_type
        channel = conn.default_channel
        payloads: list[Any] = []
        if transport == "redis":
            client = channel.client
            for queue in queues:
                for pri in channel.priority_steps:
                    key = f"{queue}{channel.sep}{pri}" if pri else queue
                    payloads += [json.loads(p) for p in client.lrange(key, 0, -1)]
            payloads += [json.loads(v)[0] for v in client.hvals(channel.unacked_key)]
        elif transport == "filesystem":
            from pathlib import Path

            folder = Path(channel.data_folder_in)
            for path in folder.glob("*.msg"):
                if path.name.partition(".")[2].removesuffix(".msg") in queues:
                    try:
                        payloads.append(json.loads(path.read_bytes()))
                    except (OSError, ValueError):  # taken by a worker while we looked
                        continue
            # A delivered message lives in the consuming worker's memory only.
        else:
            return None
    ids = set()
    for payload in payloads:
        headers = payload.get("headers") or {}
        task_id = headers.get("id") or (payload.get("properties") or {}).get("correlation_id")
        if task_id:
            ids.add(task_id)
    return ids
