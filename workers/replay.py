"""Open-loop trace replay: send each request at its arrival time, never waiting for earlier ones.

A replay runs on one asyncio event loop against one started engine. Request ``i`` is sent
at ``start + arrival_s[i] / rate_multiplier``, where ``start`` is ``time.perf_counter()``
when the measured window opens. Being late is the one error an open-loop load generator
must not hide, so the scheduler sleeps until shortly before each send time, then yields
to the loop (``asyncio.sleep(0)``) until the time is reached, and every record keeps both
its scheduled and its actual send time.

Sessions (multi-turn conversations): a session's first turn is scheduled open-loop like any
request; turn k + 1 is closed-loop within its session: it is sent ``think_time_s`` after turn
k's answer finished (not scaled by the rate multiplier: think time is the user's, not the
load's), with turn k as it was sent and this replay's own answer to it before its new
message. If turn k did not finish ``ok``, the session's later turns are not sent
(``not_sent``, with the reason in ``error``).

With a concurrency cap, requests beyond the cap wait client-side in arrival order and
their wait is recorded as ``queue_s``. Warm-up requests (copies of the first requests,
sent one at a time) run before the window opens and are not in the results.

All times in results are seconds from ``start`` on the perf_counter clock; token counts
are target-model tokens. ``RequestRecord.as_row()`` gives the fields of the
``analysis.RequestResult`` model, ready for ``bulk_create``.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import datetime as dt
import gc
import logging
import math
import platform
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workers.engines.base import Engine, EngineError, EngineRequest
from workers.telemetry import KvSampler, TelemetrySampler, hardware_describe

logger = logging.getLogger(__name__)

# Sleep until this long before a send time, then yield to the loop until it is reached: the
# loop's timers wake up to 1 ms late (epoll's timeout is rounded up to whole milliseconds).
# Just over 1 ms: a longer spin measured no better and burned twice the CPU on 2 cores.
SPIN_S = 0.0012
# The replay thread's scheduler slice during the window (see sched_slice_set).
LATENCY_SLICE_S = 0.0001
TICK_S = 0.5  # how often progress is reported and cancellation checked (seconds)

ProgressCallback = Callable[[int, int], Any]
CancelCheck = Callable[[], bool] | asyncio.Event | threading.Event


@dataclass(frozen=True)
class RequestSpec:
    """One request to replay and its arrival offset (seconds from the trace start)."""

    request: EngineRequest
    arrival_s: float
    key: Any = None  # carried into the record untouched (e.g. the TraceRequest's primary key)
    session_id: str | None = None  # the turns of one conversation share it; None: a lone request
    turn: int = 0  # 0-based; a later turn ignores arrival_s and follows its previous turn
    think_time_s: float = 0.0  # seconds after the previous turn's answer finished (turn > 0)


@dataclass
class RequestRecord:
    """What happened to one request. Seconds from the replay start; counts in tokens.

    ``status`` is ``ok``, ``failed`` (``error`` says why), ``cancelled`` (in flight when the
    replay was cancelled) or ``not_sent`` (due after the cancellation, or a later turn of a
    session whose previous turn did not finish: ``error`` says which). A later turn's
    ``scheduled_s`` is its previous turn's ``finish_s`` plus its think time.
    """

    request_id: str
    index: int
    scheduled_s: float
    key: Any = None
    session_id: str | None = None
    turn: int = 0
    sent_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    queue_s: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int | None] = field(default_factory=list)
    output_text: str = ""
    output_token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    # A server's per-request totals when it sent no steps (``{"drafts", "draft_tokens", "accepted"}``).
    spec_totals: dict[str, int] | None = None
    # The engine's count of the prompt it sent (chat template, tools, system prompt included);
    # None when the engine could not tell (the store then falls back to the trace's count).
    prompt_tokens: int | None = None
    error: str = ""
    error_transient: bool = False
    status: str = "pending"

    @property
    def num_output_tokens(self) -> int:
        """Tokens generated: the ids if the engine gave them, else the per-chunk counts it knew."""
        if self.output_token_ids:
            return len(self.output_token_ids)
        return sum(n for n in self.chunk_tokens if n)

    @property
    def send_lateness_s(self) -> float | None:
        """Seconds between the scheduled time and the hand-off to the engine, less queueing."""
        return None if self.sent_s is None else self.sent_s - self.scheduled_s - self.queue_s

    def as_row(self) -> dict[str, Any]:
        """The ``analysis.RequestResult`` fields (without ``run`` and ``trace_request``)."""
        return {
            "request_id": self.request_id,
            "scheduled_s": self.scheduled_s,
            "sent_s": self.sent_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "queue_s": self.queue_s,
            "chunk_times": self.chunk_times,
            "chunk_tokens": self.chunk_tokens,
            "num_output_tokens": self.num_output_tokens,
            "output_text": self.output_text,
            "output_token_ids": self.output_token_ids,
            "finish_reason": self.finish_reason,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "spec_totals": self.spec_totals,
            "error": self.error,
        }


@dataclass
class ReplayResult:
    """One replay. ``records`` holds the measured requests only, in the order given."""

    records: list[RequestRecord]
    start_perf: float  # perf_counter() at the window's start: records are relative to it
    started_at: dt.datetime
    ended_at: dt.datetime
    wall_s: float  # window start to the last request's end (seconds)
    rate_multiplier: float
    concurrency_cap: int | None
    warmup: int
    cancelled: bool
    counters_before: dict[str, Any]
    counters_after: dict[str, Any]
    counters_delta: dict[str, Any]
    telemetry: dict[str, Any]
    versions: dict[str, str]  # the engine's and its libraries' versions
    hardware: dict[str, Any]  # CPU model and count, memory, GPUs (see telemetry.hardware_describe)
    deadline_exceeded: bool = False  # stopped (cancelled) because the run's deadline passed

    @property
    def failed(self) -> list[RequestRecord]:
        return [r for r in self.records if r.status == "failed"]

    def send_lateness(self) -> dict[str, float | None]:
        """Client-side send lateness (seconds): p50, p99, max, and the share over 5 ms."""
        values = sorted(v for r in self.records if (v := r.send_lateness_s) is not None)
        if not values:
            return {"p50_s": None, "p99_s": None, "max_s": None, "share_over_5ms": None}
        return {
            "p50_s": percentile(values=values, q=50),
            "p99_s": percentile(values=values, q=99),
            "max_s": values[-1],
            "share_over_5ms": sum(v > 0.005 for v in values) / len(values),
        }


def percentile(*, values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of sorted values, linear interpolation (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    pos = (len(values) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def counters_delta(*, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``after - before`` for numbers and (element-wise) lists of numbers; other values from after."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        if _is_number(value) and _is_number(old):
            out[key] = value - old
        elif isinstance(value, list) and all(_is_number(v) for v in value):
            old_list = old if isinstance(old, list) else []
            out[key] = [v - (old_list[i] if i < len(old_list) else 0) for i, v in enumerate(value)]
        else:
            out[key] = value
    return out


class _SchedAttr(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("sched_policy", ctypes.c_uint32),
        ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32),
        ("sched_priority", ctypes.c_uint32),
        ("sched_runtime", ctypes.c_uint64),
        ("sched_deadline", ctypes.c_uint64),
        ("sched_period", ctypes.c_uint64),
        ("sched_util_min", ctypes.c_uint32),
        ("sched_util_max", ctypes.c_uint32),
    ]


_SCHED_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}  # sched_setattr, sched_getattr


def sched_slice_set(*, slice_s: float) -> float | None:
    """Ask Linux's EEVDF scheduler (6.12+) for a short time slice for the calling thread.

    A thread with a short slice gets an early deadline, so it runs soon after it wakes even
    when the CPUs are busy: on a loaded 2-core host a sleeping event loop's p99 wake-up delay
    fell from 0.9 ms to 0.15 ms with 0.1 ms (the replay's own send tails under load, which
    spin the last 1.2 ms, showed no measurable change either way). Returns the previous slice (seconds; 0 for the
    default) to restore, or None where the kernel or platform does not take the request.
    """
    numbers = _SCHED_SYSCALLS.get(platform.machine())
    if sys.platform != "linux" or numbers is None:
        return None
    setattr_nr, getattr_nr = numbers
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        current = _SchedAttr()
        if libc.syscall(getattr_nr, 0, ctypes.byref(current), ctypes.sizeof(_SchedAttr), 0) != 0:
            return None
        if current.sched_policy != 0:  # only SCHED_OTHER threads have a fair-share slice
            return None
        wanted = _SchedAttr(
            size=ctypes.sizeof(_SchedAttr),
            sched_policy=0,
            sched_nice=current.sched_nice,
            sched_runtime=int(slice_s * 1e9),
        )
        if libc.syscall(setattr_nr, 0, ctypes.byref(wanted), 0) != 0:
            return None
        return current.sched_runtime / 1e9
    except (OSError, AttributeError):
        return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


async def _sleep_until(target: float, *, stop: asyncio.Event) -> None:
    while not stop.is_set():
        remaining = target - time.perf_counter()
        if remaining <= 0:
            return
        if remaining > SPIN_S:
            # In slices, so that a cancellation is seen within a tick even before a long gap.
            await asyncio.sleep(min(remaining - SPIN_S, TICK_S))
        else:
            await asyncio.sleep(0)


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


def turn_request(*, previous: EngineRequest, answer: str, request: EngineRequest) -> EngineRequest:
    """A later turn as sent: the previous turn as it was sent, this replay's ``answer`` to it (an
    assistant message), then the later turn's own new message(s). Text prompts (completions API)
    are joined as text; a mix becomes chat messages."""
    if previous.messages is None and request.messages is None:
        return dataclasses.replace(request, prompt=(previous.prompt or "") + answer + (request.prompt or ""))
    history = previous.messages or [{"role": "user", "content": previous.prompt or ""}]
    new = request.messages or [{"role": "user", "content": request.prompt or ""}]
    messages = [*history, {"role": "assistant", "content": answer}, *new]
    return dataclasses.replace(request, prompt=None, messages=messages)


def _next_turns(specs: Sequence[RequestSpec]) -> dict[int, int]:
    """Index of each session turn -> index of the same session's next turn; ValueError unless
    every session's turns are 0, 1, 2, ... once each, with finite think times >= 0."""
    sessions: dict[str, dict[int, int]] = {}
    for i, spec in enumerate(specs):
        if spec.session_id is None:
            if spec.turn:
                raise ValueError(f"request {spec.request.request_id}: turn {spec.turn} without a session")
            continue
        turns = sessions.setdefault(spec.session_id, {})
        if spec.turn in turns:
            raise ValueError(f"session {spec.session_id!r}: turn {spec.turn} appears twice")
        if not (spec.think_time_s >= 0 and math.isfinite(spec.think_time_s)):
            raise ValueError(
                f"request {spec.request.request_id}: think_time_s must be >= 0, got {spec.think_time_s!r}"
            )
        turns[spec.turn] = i
    out: dict[int, int] = {}
    for session_id, turns in sessions.items():
        if sorted(turns) != list(range(len(turns))):
            raise ValueError(f"session {session_id!r}: turns must be 0, 1, 2, ... without a gap, got {sorted(turns)}")
        for turn in range(len(turns) - 1):
            out[turns[turn]] = turns[turn + 1]
    return out


def _validate(*, specs: Sequence[RequestSpec], rate_multiplier: float, concurrency_cap: int | None) -> None:
    if not specs:
        raise ValueError("nothing to replay: no requests")
    if not (rate_multiplier > 0 and math.isfinite(rate_multiplier)):
        raise ValueError(f"rate_multiplier must be a positive number, got {rate_multiplier!r}")
    if concurrency_cap is not None and concurrency_cap < 1:
        raise ValueError(f"concurrency_cap must be at least 1 or None, got {concurrency_cap!r}")
    ids = [s.request.request_id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError("request ids must be unique within a replay")
    for spec in specs:
        if not (spec.arrival_s >= 0 and math.isfinite(spec.arrival_s)):
            raise ValueError(
                f"request {spec.request.request_id}: arrival_s must be >= 0, got {spec.arrival_s!r}"
            )


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
    deadline_hit = False
    _validate(specs=specs, rate_multiplier=rate_multiplier, concurrency_cap=concurrency_cap)
    next_turn = _next_turns(specs)  # before the warm-up: a bad session is refused at once
    await _warm_up(engine=engine, specs=specs, count=warmup, cancel=cancel)
    counters_before = engine.counters()
    sampler = TelemetrySampler() if telemetry else None
    if sampler:
        sampler.start()
    # Engines that preallocate a KV cache (vLLM, in process or behind /metrics) say how full it is.
    kv_read = getattr(engine, "kv_state", None) if telemetry else None
    kv_sampler = KvSampler(read=kv_read) if kv_read is not None else None
    if kv_sampler:
        kv_sampler.start()

    stop = asyncio.Event()
    if await _cancel_requested(cancel):
        stop.set()
    semaphore = asyncio.Semaphore(concurrency_cap) if concurrency_cap else None
    total = len(specs)
    done = 0
    # Open loop: first turns (and lone requests) at their arrivals; later turns follow their previous.
    order = sorted((i for i in range(total) if not specs[i].turn), key=lambda i: specs[i].arrival_s)
    records = [
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
    # Collections during the window pause the loop for milliseconds; start it clean and keep
    # the long-lived objects out of later scans.
    gc.collect()
    gc.freeze()
    previous_slice = sched_slice_set(slice_s=LATENCY_SLICE_S)
    started_at = dt.datetime.now(dt.UTC)
    start = time.perf_counter()

    async def one(index: int, request: EngineRequest) -> None:
        nonlocal done
        record = records[index]
        try:
            if semaphore is None:
                await _consume(engine=engine, request=request, record=record, start=start)
            else:
                queued = time.perf_counter()
                async with semaphore:
                    record.queue_s = time.perf_counter() - queued
                    if stop.is_set():
                        record.status = "not_sent"
                        return
                    await _consume(engine=engine, request=request, record=record, start=start)
        finally:
            done += 1
            if index in next_turn:
                follow(index, request)

    tasks: list[asyncio.Task[None]] = []

    def follow(index: int, request: EngineRequest) -> None:
        """Schedule the session's next turn after this one's answer, or record why it is not sent."""
        nonlocal done
        record, following = records[index], next_turn[index]
        if record.status in ("failed", "cancelled"):
            reason = f"not sent: turn {record.turn} of session {record.session_id!r} was {record.status}"
            if record.status == "failed":
                reason += f" ({record.error})"
            later: int | None = following
            while later is not None:
                records[later].status, records[later].error = "not_sent", reason
                done += 1
                later = next_turn.get(later)
            return
        if record.status != "ok" or stop.is_set():
            return  # stays pending: not_sent, like everything due after a cancellation
        assert record.finish_s is not None
        records[following].scheduled_s = record.finish_s + specs[following].think_time_s
        sent = turn_request(previous=request, answer=record.output_text, request=specs[following].request)
        tasks.append(asyncio.create_task(later_turn(following, sent)))

    async def later_turn(index: int, request: EngineRequest) -> None:
        await _sleep_until(start + records[index].scheduled_s, stop=stop)
        if not stop.is_set():
            await one(index, request)

    async def schedule() -> None:
        for index in order:
            await _sleep_until(start + records[index].scheduled_s, stop=stop)
            if stop.is_set():
                return
            tasks.append(asyncio.create_task(one(index, specs[index].request)))
        # Wait for the stragglers here so that the ticker below can stop us while they run.
        while tasks and not stop.is_set():
            pending = [t for t in tasks if not t.done()]
            if not pending:
                return
            await asyncio.wait(pending, timeout=TICK_S)

    async def tick() -> None:
        nonlocal deadline_hit
        last_report = time.perf_counter()
        while True:
            await asyncio.sleep(TICK_S)
            if deadline is not None and not stop.is_set() and time.perf_counter() >= deadline:
                deadline_hit = True
                stop.set()
            if not stop.is_set() and await _cancel_requested(cancel):
                stop.set()
            if progress and time.perf_counter() - last_report >= 1.0:
                last_report = time.perf_counter()
                await _report(progress, done, total)

    ticker = asyncio.create_task(tick())
    try:
        await schedule()
        if stop.is_set():
            for task in tasks:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
        gc.unfreeze()
        end = time.perf_counter()
        if previous_slice is not None:
            sched_slice_set(slice_s=previous_slice)
        telemetry_summary = sampler.stop() if sampler else {}
        if kv_sampler:
            kv = kv_sampler.stop()
            if kv:
                telemetry_summary["kv"] = kv
        aclose = getattr(engine, "aclose", None)
        if aclose is not None:
            await aclose()
    for record in records:
        if record.status == "pending":
            record.status = "not_sent"
    await _report(progress, done, total)
    counters_after = engine.counters()
    return ReplayResult(
        records=records,
        start_perf=start,
        started_at=started_at,
        ended_at=dt.datetime.now(dt.UTC),
        wall_s=end - start,
        rate_multiplier=rate_multiplier,
        concurrency_cap=concurrency_cap,
        warmup=warmup,
        cancelled=stop.is_set(),
        counters_before=counters_before,
        counters_after=counters_after,
        counters_delta=counters_delta(before=counters_before, after=counters_after),
        telemetry=telemetry_summary,
        versions=engine.versions(),
        hardware=hardware_describe(),
        deadline_exceeded=deadline_hit,
    )


def replay_run_sync(**kwargs: Any) -> ReplayResult:
    """:func:`replay_run` on a fresh event loop (for Celery tasks and scripts)."""
    return asyncio.run(replay_run(**kwargs))
