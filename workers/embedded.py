"""A worker process for one-machine use (the demo, `run_experiment --worker`).

Production runs workers as their own services (docker-compose.yml, docs/deploy.md); on the
embedded default nothing else would consume the filesystem broker, so the command that
needs work done starts one and stops it afterwards.

Such a worker serves one experiment: it listens on that experiment's own queue
(``embedded-<id>``), so messages other commands left in the broker never run first. It
lives in its own session, and the command that started it stops it on every way out
(normal end, error, SIGINT, SIGTERM, SIGHUP): the experiment's queued runs are cancelled,
the run in flight is asked to stop and ends ``cancelled`` with the reason, and whatever is
still ``running`` once the worker is gone is cancelled too. If the command dies without
cleaning up (SIGKILL), the kernel sends the worker SIGTERM (``PR_SET_PDEATHSIG``) and the
worker's own shutdown hook cancels its run in flight.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from console.experiments.models import Run
from console.experiments.runs import runs_reap
from console.experiments.services import experiment_runs_cancel_leftover
from workers.celery import app

log = logging.getLogger(__name__)

# Set in the worker's environment by embedded_worker(); the worker's hooks below act only then.
PARENT_PID_ENV = "SPECREVIEW_EMBEDDED_PARENT_PID"
QUEUE_ENV = "SPECREVIEW_EMBEDDED_QUEUE"
STOP_TIMEOUT_S = 60.0  # how long a stopping worker may take to end its run in flight (seconds)
_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def worker_argv(*, name: str, queues: str = "cpu,gpu", include: str | None = None) -> list[str]:
    """The command line of a one-at-a-time worker (solo pool, like a GPU worker) named ``name``.

    ``include`` names extra modules the worker imports (the embedded worker's shutdown hooks).
    """
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.celery",
        "worker",
        "-Q",
        queues,
        "--pool",
        "solo",
        "--concurrency",
        "1",
        "--without-gossip",
        "--without-mingle",
        "--loglevel",
        "INFO",
        "-n",
        f"{name}@%h",
    ]
    if include:
        argv += ["--include", include]
    return argv


def embedded_queue(*, experiment_id: int) -> str:
    """The queue an embedded worker for this experiment listens on, and nobody else."""
    return f"embedded-{experiment_id}"


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP reached a command that runs an embedded worker.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way
    swallows it before the worker is stopped.
    """

    def __init__(self, signum: int):
        self.signum = signum
        self.signame = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.signame}")


@dataclass
class _InterruptState:
    received: list[int] = field(default_factory=list)
    stopping: bool = False


_interrupt = _InterruptState()


@contextlib.contextmanager
def interrupt_signals() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP (Ctrl-C, ``kill``, a closed terminal) into ``Interrupted``.

    Python's default ends the process on SIGTERM and SIGHUP without running ``finally``
    blocks, which left the embedded worker running. A signal that arrives while a worker is
    being stopped does not interrupt the stopping; it only cuts the wait for the worker short.
    Signals the process ignores stay ignored. Only the main thread can install handlers;
    elsewhere this does nothing.
    """

    def handler(signum, frame):
        _interrupt.received.append(signum)
        if not _interrupt.stopping:
            raise Interrupted(signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for name in _SIGNALS:
        sig = getattr(signal, name, None)
        # An ignored signal stays ignored (``nohup`` ignores SIGHUP; a shell's background jobs
        # ignore SIGINT): that was the caller's choice.
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@dataclass
class EmbeddedWorker:
    proc: subprocess.Popen
    queue: str
    log_path: Path
    # {experiment id: runs cancelled} once stopped, when the experiment was left unfinished.
    cancelled: dict[int, int] = field(default_factory=dict)


def _reason(owner: str, exc: BaseException | None) -> str:
    if exc is None:
        return f"{owner} ended before the run did; its worker was stopped"
    cause: BaseException | None = exc
    while cause is not None:  # e.g. an OSError writing to the closed terminal, during a SIGHUP
        if isinstance(cause, Interrupted):
            return f"{owner} was interrupted ({cause.signame}); its worker was stopped"
        cause = cause.__context__
    return f"{owner} stopped on {type(exc).__name__}: {exc}"[:500]


@contextlib.contextmanager
def embedded_worker(
    *,
    experiment_id: int,
    owner: str,
    log_path: Path | None = None,
    stop_timeout_s: float = STOP_TIMEOUT_S,
) -> Iterator[EmbeddedWorker]:
    """Start a worker that serves ``experiment_id``'s queue only; stop it on the way out.

    ``owner`` names the command in the reason its cancelled runs carry ("demo",
    "run_experiment"). Enqueue the experiment on ``worker.queue``. On the way out, however it
    comes, the worker is stopped (``worker_stop``) and no run of the experiment stays
    ``queued`` or ``running``.
    """
    log_path = log_path or Path(settings.VAR_DIR) / "worker.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    env[PARENT_PID_ENV] = str(os.getpid())
    queue = embedded_queue(experiment_id=experiment_id)
    env[QUEUE_ENV] = queue
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            worker_argv(name=f"embedded-{os.getpid()}", queues=queue, include="workers.embedded"),
            cwd=settings.BASE_DIR,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            # Its own session: the terminal's signals reach this command only, which then stops
            # the worker in order (runs cancelled first, then the process).
            start_new_session=True,
        )
        worker = EmbeddedWorker(proc=proc, queue=queue, log_path=log_path)
        failure: BaseException | None = None
        try:
            deadline = time.monotonic() + 90
            while "ready." not in log_path.read_text(errors="replace"):
                if proc.poll() is not None:
                    raise RuntimeError(f"the worker exited at start-up; see {log_path}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the worker did not start within 90 s; see {log_path}")
                time.sleep(0.3)
            with reaper_timer():
                yield worker
        except BaseException as exc:
            failure = exc
            raise
        finally:
            worker.cancelled = worker_stop(
                worker=worker,
                experiment_id=experiment_id,
                reason=_reason(owner, failure),
                unfinished_expected=failure is not None,
                timeout_s=stop_timeout_s,
            )


def worker_stop(
    *, worker: EmbeddedWorker, experiment_id: int, reason: str, unfinished_expected: bool, timeout_s: float
) -> dict[int, int]:
    """Stop an embedded worker and leave none of the experiment's runs ``queued`` or ``running``.

    With ``unfinished_expected`` (the command is leaving early) the experiment's queued runs
    are cancelled and its running run is asked to stop first, so the worker's warm shutdown
    waits for a second or so, not for the run to finish. The worker gets SIGTERM, up to
    ``timeout_s`` seconds (cut short by a second signal), then SIGKILL for its whole
    process group; runs still unfinished after that are cancelled with ``reason``.
    Returns {experiment id: runs cancelled}.
    """
    from django.db import connection

    _interrupt.stopping = True
    signals_before = len(_interrupt.received)
    cancelled: dict[int, int] = {}
    try:
        if not connection.in_atomic_block:
            connection.close()  # an interrupt may have cut a query short: start afresh
        if unfinished_expected:
            cancelled = experiment_runs_cancel_leftover(
                reason=reason, experiment_ids=[experiment_id], stop_running=False
            )
        proc = worker.proc
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while proc.poll() is None and time.monotonic() < deadline:
                if len(_interrupt.received) > signals_before:
                    break  # asked twice: stop waiting
                time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the worker if still there, and anything it spawned
        proc.wait()
        for experiment, n in experiment_runs_cancel_leftover(
            reason=reason, experiment_ids=[experiment_id], stop_running=True
        ).items():
            cancelled[experiment] = max(n, cancelled.get(experiment, 0))
        try:
            broker_queues_purge(queues=[worker.queue])
        except Exception:  # hygiene only: a later demo purges the embedded broker anyway
            log.exception("could not purge %s", worker.queue)
    finally:
        _interrupt.stopping = False
    return cancelled


def broker_queues_pending() -> set[str]:
    """Names of the queues with messages in the embedded (filesystem) broker; empty for others.

    The filesystem transport stores one file per message, named ``<ms>_<uuid>.<queue>.msg``.
    """
    folder = (settings.CELERY_BROKER_TRANSPORT_OPTIONS or {}).get("data_folder_in")
    if not settings.CELERY_BROKER_URL.startswith("filesystem") or not folder:
        return set()
    names = set()
    for entry in os.listdir(folder):
        if entry.endswith(".msg") and "." in entry[: -len(".msg")]:
            names.add(entry[: -len(".msg")].split(".", 1)[1])
    return names


def broker_queues_purge(*, queues: Iterable[str]) -> int:
    """Delete the pending messages of ``queues`` on the configured broker. Returns how many."""
    queues = list(queues)
    if not queues:
        return 0
    purged = 0
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        for queue in queues:
            purged += channel.queue_purge(queue) or 0
    return purged



@contextlib.contextmanager
def reaper_timer(*, interval_s: float | None = None) -> Iterator[threading.Thread]:
    """The periodic reaper (``runs_reap`` every ``interval_s`` seconds, default
    SPECREVIEW_REAP_EVERY_S) on a thread of this process: where no Celery beat runs, the
    process that started the embedded worker keeps runs from staying ``running`` forever."""
    from django.db import connection

    every = float(settings.SPECREVIEW_REAP_EVERY_S if interval_s is None else interval_s)
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            try:
                runs_reap()
            except Exception:  # the next tick tries again; a reaper must outlive a hiccup
                logging.getLogger(__name__).exception("the reaper failed; trying again in %s s", every)
            finally:
                connection.close()

    thread = threading.Thread(target=loop, name="runs-reaper", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(timeout=every + 60)

# --- inside the embedded worker (imported there with ``--include workers.embedded``) ---

_current_run: dict[str, int] = {}


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel for SIGTERM when the command that started this worker dies (Linux)."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    if os.getppid() != parent_pid:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _run_stop_requested(*, run_id: int, sig: str) -> None:
    from django.db import connection

    try:
        run = Run.objects.filter(pk=run_id).only("experiment_id").first()
        if run is not None:
            experiment_runs_cancel_leftover(
                reason=f"the embedded worker was stopped ({sig}) while the run was in flight",
                experiment_ids=[run.experiment_id],
                stop_running=False,
            )
    except Exception:
        log.exception("could not ask run %s to stop", run_id)
    finally:
        connection.close()


def _hooks_install(parent_pid: int) -> None:
    from celery.signals import task_postrun, task_prerun, worker_shutting_down

    def on_prerun(sender=None, task=None, kwargs=None, **_):
        if task is not None and task.name == "workers.execute_run" and kwargs:
            _current_run["run_id"] = int(kwargs["run_id"])

    def on_postrun(sender=None, task=None, **_):
        _current_run.pop("run_id", None)

    def on_shutting_down(sig=None, how=None, **_):
        run_id = _current_run.get("run_id")
        if run_id is not None:
            # In a signal handler, maybe in the middle of the run's own query: write from a
            # thread with its own connection. The run's replay sees the request within a tick.
            threading.Thread(target=_run_stop_requested, kwargs={"run_id": run_id, "sig": str(sig)}).start()

    queue = os.environ.get(QUEUE_ENV)
    if queue:
        # Tasks this worker enqueues itself (the comparison once the runs end) go to the queue
        # it serves; on the default queue nobody would run them.
        app.conf.task_default_queue = queue
    task_prerun.connect(on_prerun, weak=False)
    task_postrun.connect(on_postrun, weak=False)
    worker_shutting_down.connect(on_shutting_down, weak=False)
    _die_with_parent(parent_pid)


if os.environ.get(PARENT_PID_ENV) and "worker" in sys.argv:
    _hooks_install(int(os.environ[PARENT_PID_ENV]))
