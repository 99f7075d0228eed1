"""Open-loop trace replay against one started engine (see the package docstring for what it
measures and how): :func:`replay_run` and, on a fresh event loop, :func:`replay_run_sync`."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import gc
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from workers.engines.base import Engine, EngineError, EngineRequest
from workers.engines.server_telemetry import ServerTelemetrySampler
from workers.telemetry import KvSampler, TelemetrySampler, hardware_describe

from .records import ReplayResult, RequestRecord, RequestSpec, counters_delta
from .schedule import next_turns, specs_validate, turn_request
from .timing import LATENCY_SLICE_S, TICK_S, sched_slice_set, sleep_until

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int], Any]
CancelCheck = Callable[[], bool] | asyncio.Event | threading.Event


async def replay_run(
    *,
    engine: Engine,
    specs: Sequence[RequestSpec],
    rate_multiplier: float = 1.0,
    concurrency_cap: int | None = None,
    warmup: int = 0,
    progress: ProgressCallback | None = None,
    cancel: CancelCheck | None = None,
    telemetry: bool = True,
    deadline: float | None = None,
) -> ReplayResult:
    """Replay ``specs`` open-loop against a started engine and record every request.

    ``progress(done, total)`` is called from a worker thread (so it may use the database)
    every second and once at the end; ``cancel`` (a callable, also run in a thread, or an
    asyncio/threading Event) is checked every half second: once it says so, nothing more is
    sent, requests in flight are cancelled, and the result has ``cancelled=True``.
    A request that fails is recorded with ``status="failed"``; only a failing warm-up
    raises (EngineError), since then the engine cannot serve at all.

    ``deadline`` (a ``time.perf_counter()`` value) is the run's own time limit, enforced
    here rather than by the worker pool (a solo pool ignores Celery's limits): past it the
    replay stops as if cancelled, with ``deadline_exceeded=True``.
    """
    specs_validate(specs=specs, rate_multiplier=rate_multiplier, concurrency_cap=concurrency_cap)
    next_turn = next_turns(specs)  # before the warm-up: a bad session is refused at once
    await _warm_up(engine=engine, specs=specs, count=warmup, cancel=cancel)
    counters_before = engine.counters()
    window = await _measure(
        engine=engine,
        specs=specs,
        next_turn=next_turn,
        rate_multiplier=rate_multiplier,
        concurrency_cap=concurrency_cap,
        progress=progress,
        cancel=cancel,
        telemetry=telemetry,
        deadline=deadline,
    )
    for record in window.records:
        if record.status == "pending":
            record.status = "not_sent"
    await _report(progress, window.done, len(specs))
    counters_after = engine.counters()
    return ReplayResult(
        records=window.records,
        start_perf=window.start,
        started_at=window.started_at,
        ended_at=dt.datetime.now(dt.UTC),
        wall_s=window.end - window.start,
        rate_multiplier=rate_multiplier,
        concurrency_cap=concurrency_cap,
        warmup=warmup,
        cancelled=window.stop.is_set(),
        counters_before=counters_before,
        counters_after=counters_after,
        counters_delta=counters_delta(before=counters_before, after=counters_after),
        telemetry=window.telemetry,
        versions=engine.versions(),
        hardware=hardware_describe(),
        deadline_exceeded=window.deadline_hit,
    )


def replay_run_sync(**kwargs: Any) -> ReplayResult:
    """:func:`replay_run` on a fresh event loop (for Celery tasks and scripts)."""
    return asyncio.run(replay_run(**kwargs))


async def _measure(
    *,
    engine: Engine,
    specs: Sequence[RequestSpec],
    next_turn: dict[int, int],
    rate_multiplier: float,
    concurrency_cap: int | None,
    progress: ProgressCallback | None,
    cancel: CancelCheck | None,
    telemetry: bool,
    deadline: float | None,
) -> _Window:
    """The measured window: samplers on, every request sent at its time, then everything that
    was started for the window (samplers, scheduler slice, the engine's connections) undone."""
    sampler = TelemetrySampler() if telemetry else None
    if sampler:
        sampler.start()
    # Engines that preallocate a KV cache (vLLM, in process or behind /metrics) say how full it is.
    kv_read = getattr(engine, "kv_state", None) if telemetry else None
    kv_sampler = KvSampler(read=kv_read) if kv_read is not None else None
    if kv_sampler:
        kv_sampler.start()
    # An engine on another host (openai) says where its operator registered its telemetry.
    server_read = getattr(engine, "server_telemetry", None) if telemetry else None
    server_spec = server_read() if server_read is not None else None
    server_sampler = ServerTelemetrySampler(source=server_spec[0], read=server_spec[1]) if server_spec else None
    if server_sampler:
        server_sampler.start()
    window = _Window(engine=engine, specs=specs, next_turn=next_turn, concurrency_cap=concurrency_cap)
    if await _cancel_requested(cancel):
        window.stop.set()
    window.records = [
        RequestRecord(
            request_id=s.request.request_id,
            index=i,
            key=s.key,
            scheduled_s=s.arrival_s / rate_multiplier,
            session_id=s.session_id,
            turn=s.turn,
        )
        for i, s in enumerate(specs)
    ]
    # Open loop: first turns (and lone requests) at their arrivals; later turns follow their previous.
    window.order = sorted(
        (i for i in range(len(specs)) if not specs[i].turn), key=lambda i: specs[i].arrival_s
    )
    # Collections during the window pause the loop for milliseconds; start it clean and keep
    # the long-lived objects out of later scans.
    gc.collect()
    gc.freeze()
    previous_slice = sched_slice_set(slice_s=LATENCY_SLICE_S)
    window.started_at = dt.datetime.now(dt.UTC)
    window.start = time.perf_counter()
    ticker = asyncio.create_task(window.tick(progress=progress, cancel=cancel, deadline=deadline))
    try:
        await window.schedule()
        if window.stop.is_set():
            for task in window.tasks:
                task.cancel()
        await asyncio.gather(*window.tasks, return_exceptions=True)
    finally:
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
        gc.unfreeze()
        window.end = time.perf_counter()
        if previous_slice is not None:
            sched_slice_set(slice_s=previous_slice)
        window.telemetry = sampler.stop() if sampler else {}
        if kv_sampler:
            kv = kv_sampler.stop()
            if kv:
                window.telemetry["kv"] = kv
        window.telemetry["engine_in_process"] = getattr(engine, "in_process", True)
        if server_sampler:
            window.telemetry["server"] = server_sampler.stop()
        aclose = getattr(engine, "aclose", None)
        if aclose is not None:
            await aclose()
    return window


class _Window:
    """One replay's measured window in flight: its records, its stop flag, its tasks, and how
    many requests are done (sent and finished, or known never to be sent)."""

    def __init__(
        self,
        *,
        engine: Engine,
        specs: Sequence[RequestSpec],
        next_turn: dict[int, int],
        concurrency_cap: int | None,
    ):
        self.engine = engine
        self.specs = specs
        self.next_turn = next_turn
        self.stop = asyncio.Event()
        self.semaphore = asyncio.Semaphore(concurrency_cap) if concurrency_cap else None
        self.records: list[RequestRecord] = []
        self.order: list[int] = []  # the indexes sent open-loop, in arrival order
        self.tasks: list[asyncio.Task[None]] = []
        self.done = 0
        self.deadline_hit = False
        self.started_at = dt.datetime.now(dt.UTC)
        self.start = self.end = 0.0  # perf_counter seconds: the window's start and end
        self.telemetry: dict[str, Any] = {}

    async def schedule(self) -> None:
        """Send first turns (and lone requests) at their arrivals, then wait for the stragglers."""
        specs, records, stop = self.specs, self.records, self.stop
        for index in self.order:
            await sleep_until(self.start + records[index].scheduled_s, stop=stop)
            if stop.is_set():
                return
            self.tasks.append(asyncio.create_task(self.one(index, specs[index].request)))
        # Wait for the stragglers here so that the ticker below can stop us while they run.
        while self.tasks and not stop.is_set():
            pending = [t for t in self.tasks if not t.done()]
            if not pending:
                return
            await asyncio.wait(pending, timeout=TICK_S)

    async def one(self, index: int, request: EngineRequest) -> None:
        record = self.records[index]
        try:
            if self.semaphore is None:
                await _consume(engine=self.engine, request=request, record=record, start=self.start)
            else:
                queued = time.perf_counter()
                async with self.semaphore:
                    record.queue_s = time.perf_counter() - queued
                    if self.stop.is_set():
                        record.status = "not_sent"
                        return
                    await _consume(engine=self.engine, request=request, record=record, start=self.start)
        finally:
            self.done += 1
            if index in self.next_turn:
                self.follow(index, request)

    def follow(self, index: int, request: EngineRequest) -> None:
        """Schedule the session's next turn after this one's answer, or record why it is not sent."""
        records, next_turn = self.records, self.next_turn
        record, following = records[index], next_turn[index]
        if record.status in ("failed", "cancelled"):
            reason = f"not sent: turn {record.turn} of session {record.session_id!r} was {record.status}"
            if record.status == "failed":
                reason += f" ({record.error})"
            later: int | None = following
            while later is not None:
                records[later].status, records[later].error = "not_sent", reason
                self.done += 1
                later = next_turn.get(later)
            return
        if record.status != "ok" or self.stop.is_set():
            return  # stays pending: not_sent, like everything due after a cancellation
        assert record.finish_s is not None
        records[following].scheduled_s = record.finish_s + self.specs[following].think_time_s
        sent = turn_request(
            previous=request, answer=record.output_text, request=self.specs[following].request
        )
        self.tasks.append(asyncio.create_task(self.later_turn(following, sent)))

    async def later_turn(self, index: int, request: EngineRequest) -> None:
        await sleep_until(self.start + self.records[index].scheduled_s, stop=self.stop)
        if not self.stop.is_set():
            await self.one(index, request)

    async def tick(
        self, *, progress: ProgressCallback | None, cancel: CancelCheck | None, deadline: float | None
    ) -> None:
        """Every tick: stop at the deadline or on a cancel, and report progress once a second."""
        stop, total = self.stop, len(self.specs)
        last_report = time.perf_counter()
        while True:
            await asyncio.sleep(TICK_S)
            if deadline is not None and not stop.is_set() and time.perf_counter() >= deadline:
                self.deadline_hit = True
                stop.set()
            if not stop.is_set() and await _cancel_requested(cancel):
                stop.set()
            if progress and time.perf_counter() - last_report >= 1.0:
                last_report = time.perf_counter()
                await _report(progress, self.done, total)


async def _cancel_requested(cancel: CancelCheck | None) -> bool:
    if cancel is None:
        return False
    if isinstance(cancel, asyncio.Event | threading.Event):
        return cancel.is_set()
    # A callable may touch the database: keep it off the event loop.
    try:
        return bool(await asyncio.to_thread(cancel))
    except Exception:
        # A database hiccup must not end a run that is otherwise fine: ask again next tick.
        logger.exception("the cancel check failed; asking again in %s s", TICK_S)
        return False


async def _report(progress: ProgressCallback | None, done: int, total: int) -> None:
    if progress is None:
        return
    try:
        await asyncio.to_thread(progress, done, total)
    except Exception:
        logger.exception("the progress callback failed at %d/%d; the replay goes on", done, total)


async def _consume(*, engine: Engine, request: EngineRequest, record: RequestRecord, start: float) -> None:
    """Stream one request into its record; failures are recorded, never raised."""
    texts: list[str] = []
    record.sent_s = time.perf_counter() - start
    try:
        async for chunk in engine.stream(request):
            n = getattr(chunk, "num_tokens", None)
            if n is None and chunk.token_ids:
                n = len(chunk.token_ids)
            if chunk.text or chunk.token_ids or n:
                t = chunk.t - start
                if record.first_token_s is None:
                    record.first_token_s = t
                record.chunk_times.append(t)
                record.chunk_tokens.append(n)
                texts.append(chunk.text)
                record.output_token_ids.extend(chunk.token_ids)
            if chunk.drafted is not None:
                record.drafted.append(chunk.drafted)
                record.accepted.append(chunk.accepted or 0)
            totals = getattr(chunk, "spec_totals", None)
            if totals is not None:
                record.spec_totals = dict(totals)
            if chunk.finish_reason:
                record.finish_reason = chunk.finish_reason
            prompt_tokens = getattr(chunk, "prompt_tokens", None)
            if prompt_tokens is not None:
                record.prompt_tokens = int(prompt_tokens)
        record.status = "ok"
    except asyncio.CancelledError:
        record.status, record.error = "cancelled", "cancelled while in flight"
        raise
    except EngineError as exc:
        record.status, record.error, record.error_transient = "failed", str(exc), exc.transient
    except Exception as exc:  # an engine bug must still leave a failed record, not a hole
        record.status, record.error = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        record.finish_s = time.perf_counter() - start
        record.output_text = "".join(texts)


async def _warm_up(
    *, engine: Engine, specs: Sequence[RequestSpec], count: int, cancel: CancelCheck | None
) -> None:
    for i in range(count):
        if await _cancel_requested(cancel):
            return
        source = specs[i % len(specs)].request
        request = dataclasses.replace(source, request_id=f"warmup-{i}-{source.request_id}")
        record = RequestRecord(request_id=request.request_id, index=-1, scheduled_s=0.0)
        await _consume(engine=engine, request=request, record=record, start=time.perf_counter())
        if record.status == "failed":
            raise EngineError(f"warm-up request failed: {record.error}", transient=record.error_transient)
