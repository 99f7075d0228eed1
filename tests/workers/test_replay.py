"""Open-loop replay semantics, through the openai engine against the local scripted server."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.support.stream_server import Script, script_prompt, stream_server_spawn
from workers.engines.base import EngineConfig, EngineRequest
from workers.engines.openai_http import OpenAIEngine
from workers.replay.records import RequestSpec, counters_delta, percentile
from workers.replay.run import replay_run_sync
from workers.replay.timing import TICK_S


@pytest.fixture(scope="module")
def server():
    srv = stream_server_spawn(script=Script(ttft_s=0.0, tokens=[1]), model="tiny")
    yield srv
    srv.stop()


@pytest.fixture
def engine(server, openai_register):
    engine = OpenAIEngine()
    openai_register(server.base_url)
    engine.start(EngineConfig(engine="openai", target_model="tiny", engine_args={"server": "test"}))
    yield engine
    engine.stop()


def _spec(request_id: str, arrival_s: float, prompt: str = "hi", max_tokens: int = 8) -> RequestSpec:
    return RequestSpec(
        request=EngineRequest(request_id=request_id, max_tokens=max_tokens, prompt=prompt),
        arrival_s=arrival_s,
    )


def _log_by_id(server, prefix: str) -> dict[str, dict]:
    return {r["request_id"]: r for r in server.requests() if (r["request_id"] or "").startswith(prefix)}


def test_it_records_every_chunk_of_every_request(server, engine):
    prompt = script_prompt(ttft_s=0.01, gap_s=0.005, tokens=[1, 2, 1], finish_reason="stop")
    specs = [_spec(f"rec-{i}", 0.02 * i, prompt) for i in range(5)]
    result = replay_run_sync(engine=engine, specs=specs)
    assert [r.request_id for r in result.records] == [f"rec-{i}" for i in range(5)]
    for record in result.records:
        assert record.status == "ok" and not record.error
        assert record.chunk_tokens == [1, 2, 1] and record.num_output_tokens == 4
        assert record.output_text == " t0 t1 t2 t3" and record.finish_reason == "stop"
        assert (
            record.scheduled_s
            <= record.sent_s
            < record.first_token_s
            <= record.chunk_times[-1]
            <= record.finish_s
        )
        assert record.first_token_s == record.chunk_times[0]
    assert result.wall_s >= 0.08 + 0.02 and not result.cancelled


def test_it_sends_on_schedule_without_waiting_for_earlier_requests(server, engine):
    # Each request takes 300 ms; sent 50 ms apart, a closed loop would need 1.5 s to send them all.
    slow = script_prompt(ttft_s=0.3, tokens=[1])
    specs = [_spec(f"open-{i}", 0.05 * i, slow) for i in range(5)]
    result = replay_run_sync(engine=engine, specs=specs)
    received = _log_by_id(server, "open-")
    for record in result.records:
        server_late = received[record.request_id]["recv_s"] - (result.start_perf + record.scheduled_s)
        # A closed loop would be 300 ms late or more by the fifth request; allow a busy machine's jitter.
        assert 0 <= server_late < 0.1, (record.request_id, server_late)


def test_it_scales_arrivals_by_the_rate_multiplier(server, engine):
    specs = [_spec(f"rate-{i}", 0.1 * i) for i in range(6)]
    result = replay_run_sync(engine=engine, specs=specs, rate_multiplier=2.0)
    assert [round(r.scheduled_s, 6) for r in result.records] == [0.0, 0.05, 0.1, 0.15, 0.2, 0.25]
    received = sorted(r["recv_s"] for r in _log_by_id(server, "rate-").values())
    # 0.25 s apart at 2x (0.5 s unscaled, 0.125 s at 4x); the server's receive times carry network
    # and scheduling jitter, so the window only has to tell those apart.
    assert 0.2 <= received[-1] - received[0] <= 0.35


def test_it_queues_beyond_the_concurrency_cap_and_records_the_wait(server, engine):
    slow = script_prompt(ttft_s=0.2, tokens=[1])
    specs = [_spec(f"cap-{i}", 0.0, slow) for i in range(6)]
    result = replay_run_sync(engine=engine, specs=specs, concurrency_cap=2)
    queues = sorted(r.queue_s for r in result.records)
    # Two at once, 200 ms each (never less): waits of about 0, 0, 0.2, 0.2, 0.4, 0.4 s.
    for got, expected in zip(queues, [0, 0, 0.2, 0.2, 0.4, 0.4], strict=True):
        assert expected <= got < expected + 0.15, queues
    # A queued request goes as soon as a slot frees: when an earlier one finishes.
    for record in result.records:
        if record.queue_s > 0.1:
            freed = [r.finish_s for r in result.records if r.finish_s <= record.sent_s]
            assert freed and record.sent_s - max(freed) < 0.05
    for record in result.records:
        # Sent = scheduled + queued, give or take a loaded machine's scheduling delay.
        assert record.sent_s - record.scheduled_s == pytest.approx(record.queue_s, abs=0.05)
        assert record.send_lateness_s < 0.05
    spans = [(r["recv_s"], r["end_s"]) for r in _log_by_id(server, "cap-").values()]
    most_at_once = max(sum(start <= t < end for start, end in spans) for t, _ in spans)
    assert most_at_once == 2


def test_it_excludes_warm_up_requests_and_their_counters(server, engine):
    spec_prompt = script_prompt(tokens=[2], drafted=[3], accepted=[1])
    specs = [_spec(f"warm-{i}", 0.01 * i, spec_prompt) for i in range(4)]
    result = replay_run_sync(engine=engine, specs=specs, warmup=3)
    assert [r.request_id for r in result.records] == [f"warm-{i}" for i in range(4)]
    seen = [r["request_id"] for r in server.requests() if "warm-" in (r["request_id"] or "")]
    assert seen[:3] == ["warmup-0-warm-0", "warmup-1-warm-1", "warmup-2-warm-2"]
    assert result.warmup == 3
    # Seven requests drafted, but only the four measured ones count.
    assert result.counters_delta["spec_decode_num_drafts"] == 4
    assert result.counters_delta["spec_decode_num_accepted_tokens"] == 4


def test_it_records_failed_requests_as_failed_and_keeps_the_rest(server, engine):
    prompts = [
        "fine",
        script_prompt(status=400, message="prompt too long"),
        script_prompt(tokens=[1, 1, 1], drop_after=1),
        script_prompt(tokens=[1, 1], malformed_after=1),
        "fine again",
    ]
    specs = [_spec(f"fail-{i}", 0.01 * i, p) for i, p in enumerate(prompts)]
    result = replay_run_sync(engine=engine, specs=specs)
    assert [r.status for r in result.records] == ["ok", "failed", "failed", "failed", "ok"]
    assert "prompt too long" in result.records[1].error and not result.records[1].error_transient
    assert result.records[2].error_transient and result.records[2].chunk_tokens == [1]
    assert "malformed" in result.records[3].error
    assert all(r.finish_s is not None for r in result.records)
    assert len(result.failed) == 3


def test_it_stops_cleanly_when_cancelled(server, engine):
    cancel = threading.Event()
    cancelled_at: list[float] = []

    def cancel_now() -> None:
        cancelled_at.append(time.perf_counter())
        cancel.set()

    specs = [_spec(f"cancel-{i}", 0.1 * i) for i in range(50)]
    specs.append(_spec("cancel-long", 0.05, script_prompt(ttft_s=30.0, tokens=[1])))
    threading.Timer(1.0, cancel_now).start()
    began = time.perf_counter()
    result = replay_run_sync(engine=engine, specs=specs, cancel=cancel)
    assert time.perf_counter() - began < 3.0
    assert result.cancelled
    statuses = {r.request_id: r.status for r in result.records}
    assert statuses["cancel-long"] == "cancelled"
    assert set(statuses.values()) == {"ok", "cancelled", "not_sent"}
    # How many went out before the cancel depends on how busy the machine is; what may not vary:
    # nothing scheduled well after the cancel (the replay polls for it every tick) was sent, every
    # request that finished reached the server, and nothing reached it that the run calls unsent.
    cancel_s = cancelled_at[0] - result.start_perf
    for record in result.records:
        if record.scheduled_s > cancel_s + 2 * TICK_S:
            assert record.status == "not_sent", (record.request_id, record.scheduled_s, cancel_s)
    ok = sum(s == "ok" for s in statuses.values())
    started = sum(s != "not_sent" for s in statuses.values())
    assert ok >= 1 and started <= 20  # the cancel came at ~1 s of a 5 s schedule
    assert ok + 1 <= len(_log_by_id(server, "cancel-")) <= started  # the long one reached it too
    # The engine is still usable afterwards.
    again = replay_run_sync(engine=engine, specs=[_spec("cancel-after", 0.0)])
    assert again.records[0].status == "ok"


def test_it_stops_at_the_runs_deadline_without_the_pool_enforcing_it(server, engine):
    specs = [_spec(f"deadline-{i}", 0.1 * i) for i in range(40)]  # a 4 s schedule
    started = time.perf_counter()
    result = replay_run_sync(engine=engine, specs=specs, deadline=started + 1.0)
    assert result.deadline_exceeded and result.cancelled
    assert time.perf_counter() - started < 3.0
    assert "not_sent" in {r.status for r in result.records}
    untimed = replay_run_sync(engine=engine, specs=specs[:3])
    assert not untimed.deadline_exceeded and not untimed.cancelled


def test_it_reports_progress_from_a_thread_without_an_event_loop(server, engine):
    calls: list[tuple[float, int, int, bool]] = []

    def progress(done: int, total: int) -> None:
        try:
            asyncio.get_running_loop()
            in_loop = True
        except RuntimeError:
            in_loop = False  # so a Django ORM write is allowed here
        calls.append((time.perf_counter(), done, total, in_loop))

    specs = [_spec(f"prog-{i}", 0.2 * i) for i in range(30)]  # a 5.8 s schedule
    began = time.perf_counter()
    replay_run_sync(engine=engine, specs=specs, progress=progress, cancel=lambda: False)
    times = [began] + [c[0] for c in calls]
    # About once a second while it runs (a loaded machine may delay a report), not only at the end.
    assert len(calls) >= 3
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) <= 3.5
    assert calls[-1][1:3] == (30, 30)
    assert not any(c[3] for c in calls)
    assert [c[1] for c in calls] == sorted(c[1] for c in calls)


def test_it_goes_on_when_the_progress_callback_or_cancel_check_fails(server, engine):
    def broken(*args):
        raise ConnectionError("database went away")

    specs = [_spec(f"broken-{i}", 0.3 * i) for i in range(5)]
    result = replay_run_sync(engine=engine, specs=specs, progress=broken, cancel=broken)
    assert [r.status for r in result.records] == ["ok"] * 5 and not result.cancelled


def test_it_gives_rows_that_fit_the_request_result_model(server, engine):
    from console.results.models import RequestResult

    result = replay_run_sync(engine=engine, specs=[_spec("row-0", 0.0, script_prompt(tokens=[2, 1]))])
    row = result.records[0].as_row()
    fields = {f.name for f in RequestResult._meta.get_fields()}
    assert set(row) <= fields
    assert row["chunk_tokens"] == [2, 1] and row["num_output_tokens"] == 3
    assert len(row["chunk_times"]) == 2


def test_it_samples_telemetry_over_the_window(server, engine):
    result = replay_run_sync(engine=engine, specs=[_spec(f"tel-{i}", 0.1 * i) for i in range(6)])
    assert result.telemetry["source"] in ("psutil", "nvml")
    assert result.telemetry["peak_memory_bytes"] > 10_000_000
    assert result.telemetry["num_samples"] >= 4
    assert result.versions["engine"] == "openai" and result.hardware["cpu_count"] >= 1


@pytest.mark.parametrize(
    ("specs", "kwargs", "message"),
    [
        ([], {}, "no requests"),
        ([_spec("a", 0.0), _spec("a", 1.0)], {}, "unique"),
        ([_spec("a", -1.0)], {}, "arrival_s"),
        ([_spec("a", 0.0)], {"rate_multiplier": 0}, "rate_multiplier"),
        ([_spec("a", 0.0)], {"concurrency_cap": 0}, "concurrency_cap"),
    ],
)
def test_it_refuses_bad_input_before_sending_anything(engine, specs, kwargs, message):
    with pytest.raises(ValueError, match=message):
        replay_run_sync(engine=engine, specs=specs, **kwargs)


def test_it_subtracts_counters_including_per_position_lists():
    before = {"spec_decode_num_drafts": 10, "spec_decode_num_accepted_tokens_per_pos": [5, 2], "note": "x"}
    after = {"spec_decode_num_drafts": 14, "spec_decode_num_accepted_tokens_per_pos": [7, 3, 1], "note": "y"}
    assert counters_delta(before=before, after=after) == {
        "spec_decode_num_drafts": 4,
        "spec_decode_num_accepted_tokens_per_pos": [2, 1, 1],
        "note": "y",
    }


def test_it_interpolates_percentiles_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values=values, q=50) == 2.5
    assert percentile(values=values, q=99) == pytest.approx(3.97)
    assert percentile(values=[7.0], q=99) == 7.0


def test_it_sets_and_restores_the_threads_scheduler_slice():
    from workers.replay.timing import sched_slice_set

    previous = sched_slice_set(slice_s=0.0002)
    if previous is None:
        pytest.skip("this kernel or platform takes no custom scheduler slice (Linux 6.12+ does)")
    try:
        assert sched_slice_set(slice_s=0.0003) == pytest.approx(0.0002)
    finally:
        sched_slice_set(slice_s=previous)
    assert sched_slice_set(slice_s=previous) == pytest.approx(previous)
