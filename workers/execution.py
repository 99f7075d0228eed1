"""Execute one run: claim it, start its engine, replay the trace, store what a user saw.

Called by the thin ``execute_run`` task; the run's life (claim, heartbeat, finish, fail)
is ``console/experiments/runs.py``. From the claim on, a heartbeat thread keeps the claim
alive (and learns of a cancel or a lost claim); every way out of here ends the run
``done``, ``failed`` (with the reason), ``cancelled`` or back in ``queued`` for a retry,
unless the claim was lost, in which case nothing is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection

from console.analysis.quality import response_format_check, tool_call_check
from console.experiments.matrix import output_buckets_parse, recorded_output_tokens
from console.experiments.models import Experiment, Run
from console.experiments.runs import run_cancel, run_claim, run_fail, run_heartbeat, run_update
from console.results.models import RequestResult
from console.results.services import results_store
from console.traces.models import TraceRequest
from workers.engines import Engine, EngineConfig, EngineError, EngineRequest, engine_create
from workers.engines.redaction import text_scrub
from workers.engines.servers import credential_values
from workers.hardware import hardware_describe
from workers.replay.records import ReplayResult, RequestSpec, run_telemetry_row
from workers.replay.run import replay_run

log = logging.getLogger(__name__)
WRITE_TRIES = 2  # a results write that lost its database connection is tried once more


def run_requests(*, experiment: Experiment, bucket: str = "") -> list[tuple[TraceRequest, EngineRequest]]:
    """The requests every arm replays: the same ids, arrivals, prompts, limits and seeds.

    ``bucket``: a run's output-length bucket label (``Run.output_bucket``): only the requests whose
    recorded output length is in it, ``max_tokens`` capped at its limit; empty = every request.

    A later turn of a session holds only its new message: the replay puts the conversation
    before it (that arm's own earlier answers), so the arms' requests differ from turn 1 on.
    Splits keep sessions whole, so filtering by split never cuts a conversation."""
    qs = TraceRequest.objects.filter(trace_id=experiment.trace_id).order_by("position")
    if experiment.split != "all":
        qs = qs.filter(split=experiment.split)
    chosen = None
    if bucket:
        buckets = output_buckets_parse(experiment.output_buckets)
        chosen = next((b for b in buckets if b.label == bucket), None)
        if chosen is None:
            raise ValueError(f"the run's output bucket {bucket!r} is not one of the experiment's")
    out = []
    for tr in qs:
        if chosen is not None and not chosen.contains(
            recorded_output_tokens(max_tokens=tr.max_tokens, metadata=tr.metadata)
        ):
            continue
        max_tokens = tr.max_tokens
        if experiment.output_limit:
            max_tokens = min(max_tokens, experiment.output_limit)
        if chosen is not None:
            max_tokens = min(max_tokens, chosen.output_limit)
        greedy = experiment.sampling == "greedy"
        out.append(
            (
                tr,
                EngineRequest(
                    request_id=tr.request_id,
                    max_tokens=max_tokens,
                    prompt=tr.prompt,
                    messages=tr.messages,
                    temperature=0.0 if greedy or tr.temperature is None else float(tr.temperature),
                    top_p=1.0 if greedy or tr.top_p is None else float(tr.top_p),
                    seed=tr.seed,
                    response_format=tr.response_format,
                    tools=tr.tools,
                ),
            )
        )
    return out


def _validity(record_text: str, tr: TraceRequest) -> dict:

    fmt = response_format_check(record_text, tr.response_format)
    tool = tool_call_check(record_text, tr.tools)
    return {
        "json_valid": fmt["json_valid"],
        "schema_valid": fmt["schema_valid"],
        "tool_call_valid": tool["tool_valid"],
    }


class Heartbeat:
    """Beats for one claim from its own thread (and database connection) every
    ``interval_s`` seconds, carrying the replay's progress; remembers a cancel or a loss."""

    def __init__(self, *, run_id: int, token: str, interval_s: float):
        self.run_id, self.token, self.interval_s = run_id, token, interval_s
        self.done: int | None = None
        self.total: int | None = None
        self.state = "ok"  # "ok" | "cancel" | "lost"
        self.stop_requested = threading.Event()  # the replay's cancel: set on "cancel" or "lost"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-run-{run_id}", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()
        connection.close()

    def beat(self) -> str:
        try:
            state = run_heartbeat(run_id=self.run_id, token=self.token, done=self.done, total=self.total)
        except DatabaseError:
            # A database hiccup: beat again next time; the reaper waits far longer than one beat.
            log.exception("run %s: heartbeat failed", self.run_id)
            connection.close()
            return self.state
        if self.state != "lost":
            self.state = state
        if self.state != "ok":
            self.stop_requested.set()
        return self.state

    @contextlib.contextmanager
    def running(self) -> Iterator[Heartbeat]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=self.interval_s + 30)


def run_execute(*, run_id: int) -> str:
    """Run one arm at one load level. Returns the final status ("done", "failed", "cancelled",
    "lost" when another attempt holds the run now, or "skipped" when there was nothing to
    claim). Raises EngineError only when transient, after the run was put back to
    ``queued``, so that the task can retry."""
    token = run_claim(run_id=run_id, worker=socket.gethostname())
    if token is None:
        return "skipped"
    heartbeat = Heartbeat(run_id=run_id, token=token, interval_s=settings.SPECREVIEW_RUN_HEARTBEAT_S)
    with heartbeat.running():
        try:
            return _execute_claimed(run_id=run_id, token=token, heartbeat=heartbeat)
        except EngineError:
            raise
        except SoftTimeLimitExceeded:
            return _fail(
                run_id,
                token,
                f"stopped at the soft time limit ({settings.CELERY_TASK_SOFT_TIME_LIMIT} s); "
                "raise SPECREVIEW_RUN_SOFT_TIME_LIMIT or shorten the trace",
            )
        except Exception as exc:  # the user must see why; the traceback goes to the worker log
            log.exception("run %s failed", run_id)
            return _fail(run_id, token, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")


def _fail(run_id: int, token: str, message: str, *, retry: bool = False) -> str:
    _connection_reset()
    # Viewers read run errors: whatever an engine or server said goes in scrubbed of keys.
    message = text_scrub(message, limit=4000)
    if not run_fail(run_id=run_id, token=token, message=message, retry=retry):
        log.warning("run %s: claim lost; nothing written", run_id)
        return "lost"
    return "queued" if retry else "failed"


def _connection_reset() -> None:
    """Drop this thread's database connection if it broke, so the next query reconnects."""
    if connection.in_atomic_block:  # a caller's own transaction (a test's): not ours to end
        return
    try:
        if connection.connection is not None and not connection.is_usable():
            connection.close()
    except DatabaseError:
        connection.close()


def _execute_claimed(*, run_id: int, token: str, heartbeat: Heartbeat) -> str:
    run = Run.objects.select_related("experiment", "arm__config").get(pk=run_id)
    experiment = run.experiment
    config = run.arm.config
    pairs = run_requests(experiment=experiment, bucket=run.output_bucket)
    heartbeat.total = len(pairs)
    hardware = hardware_describe()
    run_update(
        run_id=run_id,
        token=token,
        progress_total=len(pairs),
        hardware=hardware,
        config_hash=config.content_hash,
    )
    # The run's own time limit, counted from the claim, enforced by the replay.
    deadline = time.perf_counter() + settings.CELERY_TASK_SOFT_TIME_LIMIT
    engine = None
    try:
        engine = engine_create(config.engine)
        engine.start(
            EngineConfig(
                engine=config.engine,
                target_model=config.target_model,
                engine_args=config.engine_args,
                speculative_config=config.speculative_config,
            )
        )
        if heartbeat.beat() == "lost":
            return "lost"
        # The number format an engine chose for this machine, and why (hf: workers/dtype.py).
        dtype_choice = getattr(engine, "dtype_choice", None)
        choice = dtype_choice() if callable(dtype_choice) else None
        extra = {"hardware": {**hardware, "dtype": choice}} if choice else {}
        run_update(run_id=run_id, token=token, versions=engine.versions(), **extra)
        result = _replay(engine=engine, run=run, pairs=pairs, heartbeat=heartbeat, deadline=deadline)
    except EngineError as exc:
        if exc.transient and run.attempt < settings.SPECREVIEW_RUN_MAX_ATTEMPTS:
            if _fail(run_id, token, str(exc), retry=True) == "queued":
                raise
            return "lost"
        return _fail(run_id, token, str(exc))
    finally:
        if engine is not None:
            try:
                engine.stop()
            except Exception:
                log.exception("run %s: engine stop failed", run_id)

    return _replay_outcome(run_id=run_id, token=token, heartbeat=heartbeat, pairs=pairs, result=result)


def _replay(
    *,
    engine: Engine,
    run: Run,
    pairs: list[tuple[TraceRequest, EngineRequest]],
    heartbeat: Heartbeat,
    deadline: float,
) -> ReplayResult:
    """Replay the run's requests on the started engine at the run's load; the heartbeat carries the
    progress out and the cancel in. ``deadline``: ``time.perf_counter()`` seconds."""
    specs = [
        RequestSpec(
            request=req,
            arrival_s=tr.arrival_s,
            key=tr.pk,
            session_id=tr.session_id or tr.request_id,
            turn=tr.turn,
            think_time_s=tr.think_time_s,
        )
        for tr, req in pairs
    ]

    def progress(done: int, total: int) -> None:
        heartbeat.done, heartbeat.total = done, total

    return asyncio.run(
        replay_run(
            engine=engine,
            specs=specs,
            rate_multiplier=run.rate_multiplier,
            concurrency_cap=run.concurrency_cap,
            warmup=run.experiment.warmup,
            progress=progress,
            cancel=heartbeat.stop_requested,
            deadline=deadline,
        )
    )


def _replay_outcome(
    *,
    run_id: int,
    token: str,
    heartbeat: Heartbeat,
    pairs: list[tuple[TraceRequest, EngineRequest]],
    result: ReplayResult,
) -> str:
    """How a finished replay ends the run: lost, failed (time limit, or every request failed),
    cancelled, or its results stored."""
    if heartbeat.state == "lost":
        log.warning("run %s: claim lost during the replay; nothing written", run_id)
        return "lost"
    if result.deadline_exceeded:
        return _fail(
            run_id,
            token,
            f"stopped at the run's time limit ({settings.CELERY_TASK_SOFT_TIME_LIMIT} s); "
            "raise SPECREVIEW_RUN_SOFT_TIME_LIMIT or shorten the trace",
        )
    if result.cancelled:
        return "cancelled" if run_cancel(run_id=run_id, token=token) else "lost"
    measured = [r for r in result.records if r.status != "not_sent"]
    failed = [r for r in result.records if r.error]  # later turns not sent after a failure among them
    if measured and all(r.error for r in measured):
        # An engine that failed every request measured nothing: say what it said.
        return _fail(
            run_id,
            token,
            f"the engine failed every request ({len(failed)} of {len(result.records)}); "
            f"first error: {failed[0].error}",
        )
    return _results_store(run_id=run_id, token=token, pairs=pairs, result=result, failed=len(failed))


def _results_store(*, run_id: int, token: str, pairs: list, result: ReplayResult, failed: int) -> str:
    by_key = {tr.pk: tr for tr, _ in pairs}
    secrets = credential_values()  # read once: per-request errors are scrubbed like run errors
    # The KV-cache summary, the client's and the server's telemetry ride in RunTelemetry.counters.
    telemetry = run_telemetry_row(result)
    # The engine's versions again at the end: what it learnt while serving (the openai engine's
    # streams that ended without [DONE]) joins what it said at start.
    versions = {"versions": result.versions} if result.versions else {}
    if not run_update(
        run_id=run_id, token=token, prompt_tokens=_prompt_tokens(result.records, by_key), **versions
    ):
        log.warning("run %s: claim lost before the results were stored; nothing written", run_id)
        return "lost"
    for attempt in range(1, WRITE_TRIES + 1):
        rows = [
            RequestResult(
                run_id=run_id,
                trace_request_id=by_key[record.key].pk,
                **_row_scrubbed(record.as_row(), secrets),
                **_validity(record.output_text, by_key[record.key]),
            )
            for record in result.records
        ]
        try:
            written = results_store(
                run_id=run_id,
                token=token,
                rows=rows,
                telemetry=telemetry,
                wall_s=result.wall_s,
                error=f"{failed} of {len(result.records)} requests failed" if failed else "",
            )
        except (OperationalError, InterfaceError) as exc:
            log.warning(
                "run %s: results write lost its database connection (try %d): %s", run_id, attempt, exc
            )
            _connection_reset()
            if attempt == WRITE_TRIES:
                return _fail(
                    run_id,
                    token,
                    f"the database connection was lost while storing the results ({attempt} tries): "
                    f"{type(exc).__name__}: {exc}; retry the run",
                )
            continue
        if not written:
            log.warning("run %s: claim lost before the results were stored; nothing written", run_id)
            return "lost"
        return "done"
    raise AssertionError("unreachable")


def _prompt_tokens(records: list, by_key: dict) -> dict[str, dict[str, Any]]:
    """Per request id, the prompt length in tokens as the engine counted it, else the trace's count.

    The engine's count is the prompt actually sent (after the chat template, with tools); the
    trace's is its import-time count (a tokenizer's, or the characters/4 estimate), marked so.
    """
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.prompt_tokens is not None:
            out[record.request_id] = {"n": record.prompt_tokens, "source": "engine"}
        else:
            out[record.request_id] = {"n": by_key[record.key].prompt_tokens, "source": "trace"}
    return out


def _row_scrubbed(row: dict, secrets: list[str]) -> dict:
    if row["error"]:
        row["error"] = text_scrub(row["error"], secrets=secrets)
    return row
