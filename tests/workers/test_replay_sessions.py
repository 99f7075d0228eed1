"""Multi-turn sessions in the replay, against the scripted server, timed at the server.

Two "arms" are two servers whose default scripts answer differently (2 tokens against 3), so
a later turn that carried the other arm's answer, or the recorded one, would show. The server
logs, on the shared perf_counter clock, when each request arrived (``recv_s``) and when it
wrote its last chunk (``end_s``), and (``log_bodies``) the messages it was sent.

The issue's bound: turn k + 1 reaches the server its think time after turn k's answer ended,
within 5 ms. As in test_replay_fidelity.py, another process on a shared 2-core machine can take
the CPU for milliseconds at any moment, so the bound is asserted on the 95th percentile of 48
turns, a looser one on the worst case, and the distribution is in the message. Two clocks for
"the previous answer finished" are checked: the server's last write (so the error includes that
write's delivery to the client) and the client's own finish time (the replay's send lateness).
"""

from __future__ import annotations

import os

import pytest

from tests.support.stream_server import Script, script_prompt, stream_server_spawn
from workers.engines.base import EngineConfig, EngineRequest
from workers.engines.openai_http import OpenAIEngine
from workers.replay.records import RequestSpec, percentile
from workers.replay.run import replay_run_sync
from workers.replay.schedule import turn_request

THINK_BOUND_S = 0.005  # the issue's bound on (turn k + 1 arrival) - (turn k finish) - think time
WORST_S = 0.025  # the worst case on a loaded shared machine (as the fidelity tests allow)
ARM_TOKENS = {"a": [1, 1], "b": [1, 1, 1]}


RAISED_NICENESS = -10  # as in test_replay_fidelity.py, where allowed: other work must not decide the timing


@pytest.fixture(scope="module")
def servers():
    spawned = {
        arm: stream_server_spawn(
            script=Script(ttft_s=0.01, gap_s=0.004, tokens=tokens), model="tiny", log_bodies=True
        )
        for arm, tokens in ARM_TOKENS.items()
    }
    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, RAISED_NICENESS)
        for srv in spawned.values():
            os.setpriority(os.PRIO_PROCESS, srv.proc.pid, RAISED_NICENESS)
    except PermissionError:
        pass  # an unprivileged run measures at normal priority; the message says which
    yield spawned
    os.setpriority(os.PRIO_PROCESS, 0, before)
    for srv in spawned.values():
        srv.stop()


@pytest.fixture
def engines(servers, openai_register):
    out = {}
    for arm, srv in servers.items():
        openai_register(srv.base_url, name=f"arm-{arm}")
        engine = OpenAIEngine()
        engine.start(EngineConfig(engine="openai", target_model="tiny", engine_args={"server": f"arm-{arm}"}))
        out[arm] = engine
    yield out
    for engine in out.values():
        engine.stop()


def _turn(session: str, turn: int, *, arrival_s: float = 0.0, think_s: float = 0.0, text: str = "") -> RequestSpec:
    request_id = f"{session}-t{turn}"
    return RequestSpec(
        request=EngineRequest(
            request_id=request_id,
            max_tokens=16,
            messages=[{"role": "user", "content": text or f"question {turn} of {session}"}],
        ),
        arrival_s=arrival_s,
        key=request_id,
        session_id=session,
        turn=turn,
        think_time_s=think_s,
    )


# 8 sessions of 4 turns: think times from 0 (sent as soon as the answer ends) to 0.15 s
THINK = {f"s{i}": [round(0.01 * ((5 * i + 3 * k) % 16), 3) for k in range(3)] for i in range(8)}
STARTS = {f"s{i}": 0.1 * i for i in range(8)}
LONE_ARRIVALS = [0.05 + 0.15 * i for i in range(5)]  # among the sessions' turns


def _session_specs(prefix: str) -> list[RequestSpec]:
    specs = []
    for name, thinks in THINK.items():
        session = f"{prefix}{name}"
        specs.append(_turn(session, 0, arrival_s=STARTS[name]))
        specs += [_turn(session, k + 1, think_s=think) for k, think in enumerate(thinks)]
    # lone requests keep their open-loop arrivals among the sessions
    specs += [
        RequestSpec(
            request=EngineRequest(request_id=f"{prefix}lone-{i}", max_tokens=4, prompt="hi"),
            arrival_s=LONE_ARRIVALS[i],
        )
        for i in range(5)
    ]
    return specs


def _describe(errors: list[float]) -> str:
    values = sorted(errors)
    return (
        f"n={len(values)} min={values[0] * 1e3:.3f} ms p50={percentile(values=values, q=50) * 1e3:.3f} ms "
        f"p95={percentile(values=values, q=95) * 1e3:.3f} ms max={values[-1] * 1e3:.3f} ms "
        f"(niceness {os.getpriority(os.PRIO_PROCESS, 0)}, load average {os.getloadavg()[0]:.1f})"
    )


@pytest.mark.alone  # a millisecond timing bound: it failed (p95 10 ms) beside the other lane's load
def test_it_replays_each_turn_after_its_think_time_with_the_same_arms_answers(servers, engines):
    gaps, lateness = [], []  # seconds, over both arms
    for arm in ("a", "b"):
        prefix = f"sess-{arm}-"
        result = replay_run_sync(engine=engines[arm], specs=_session_specs(prefix), telemetry=False)
        assert not result.failed and all(r.status == "ok" for r in result.records)
        log = {r["request_id"]: r for r in servers[arm].requests() if (r["request_id"] or "").startswith(prefix)}
        records = {r.request_id: r for r in result.records}
        answer = "".join(f" t{i}" for i in range(sum(ARM_TOKENS[arm])))
        other = "".join(f" t{i}" for i in range(sum(ARM_TOKENS["b" if arm == "a" else "a"])))
        for name, thinks in THINK.items():
            session = f"{prefix}{name}"
            for k, think in enumerate(thinks, start=1):
                before, now = log[f"{session}-t{k - 1}"], log[f"{session}-t{k}"]
                record, previous = records[f"{session}-t{k}"], records[f"{session}-t{k - 1}"]
                assert previous.finish_s is not None
                # at the server: arrival of this turn - the end of the previous answer (the server's
                # last write; the client saw it a delivery later) - the think time
                gaps.append(now["recv_s"] - before["end_s"] - think)
                # at the server: arrival - (the previous answer's end as the client saw it + think time),
                # the send lateness the fidelity tests measure for first turns
                lateness.append(now["recv_s"] - (result.start_perf + previous.finish_s + think))
                assert record.scheduled_s == pytest.approx(previous.finish_s + think, abs=1e-9)
                assert (record.session_id, record.turn) == (session, k)
                # the messages: every earlier question with this arm's own answer, then the new question
                expected = []
                for j in range(k):
                    expected += [
                        {"role": "user", "content": f"question {j} of {session}"},
                        {"role": "assistant", "content": answer},
                    ]
                expected.append({"role": "user", "content": f"question {k} of {session}"})
                assert now["messages"] == expected, f"{session} turn {k}: {now['messages']}"
                assert all(m["content"] != other for m in now["messages"])
            assert log[f"{session}-t0"]["messages"] == [{"role": "user", "content": f"question 0 of {session}"}]
        # lone requests and first turns stay open-loop: sent at their arrival, whatever the sessions do
        for i in range(5):
            served = log[f"{prefix}lone-{i}"]
            assert 0 < served["recv_s"] - (result.start_perf + LONE_ARRIVALS[i]) < WORST_S
    measured = (("think-time error from the server's end", gaps), ("send lateness at the server", lateness))
    for what, errors in measured:
        print(f"{what}: {_describe(errors)}")  # shown with -s or -rA: the numbers, not just a pass
    for what, errors in measured:
        values = sorted(errors)
        assert len(values) == 48 and values[0] > 0, f"{what}: sent before its think time: {_describe(errors)}"
        assert percentile(values=values, q=95) <= THINK_BOUND_S, f"{what}: {_describe(errors)}"
        assert values[-1] <= WORST_S, f"{what}: {_describe(errors)}"


def test_it_does_not_send_the_turns_after_a_failed_turn_and_says_why(servers, engines):
    specs = [
        _turn("broken", 0, arrival_s=0.0),
        _turn("broken", 1, think_s=0.01, text=script_prompt(status=400, message="context too long")),
        _turn("broken", 2, think_s=0.01),
        _turn("broken", 3, think_s=0.01),
        _turn("fine", 0, arrival_s=0.01),
        _turn("fine", 1, think_s=0.02),
    ]
    result = replay_run_sync(engine=engines["a"], specs=specs, telemetry=False)
    status = {r.request_id: r.status for r in result.records}
    assert status == {
        "broken-t0": "ok",
        "broken-t1": "failed",
        "broken-t2": "not_sent",
        "broken-t3": "not_sent",
        "fine-t0": "ok",
        "fine-t1": "ok",
    }
    skipped = [r for r in result.records if r.status == "not_sent"]
    assert all("turn 1 of session 'broken' was failed" in r.error and "context too long" in r.error for r in skipped)
    served = {r["request_id"] for r in servers["a"].requests()}
    assert "broken-t1" in served and not {"broken-t2", "broken-t3"} & served


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ([_turn("s", 0), _turn("s", 2)], "without a gap"),
        ([_turn("s", 0), _turn("s", 0)], "appears twice"),
        ([_turn("s", 0), _turn("s", 1, think_s=-1.0)], "think_time_s must be >= 0"),
    ],
)
def test_it_refuses_broken_sessions_before_sending_anything(engines, specs, message):
    unique = [
        RequestSpec(
            request=EngineRequest(request_id=f"bad-{i}", max_tokens=4, messages=s.request.messages),
            arrival_s=s.arrival_s,
            session_id=s.session_id,
            turn=s.turn,
            think_time_s=s.think_time_s,
        )
        for i, s in enumerate(specs)
    ]
    with pytest.raises(ValueError, match=message):
        replay_run_sync(engine=engines["a"], specs=unique, telemetry=False)


def test_it_builds_a_later_turn_from_the_previous_turn_as_sent_and_the_answer():
    first = EngineRequest(request_id="t0", max_tokens=4, messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    later = EngineRequest(request_id="t1", max_tokens=4, messages=[{"role": "user", "content": "more"}])
    sent = turn_request(previous=first, answer="hello", request=later)
    assert sent.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "more"},
    ]
    assert sent.request_id == "t1" and later.messages == [{"role": "user", "content": "more"}]
    text = turn_request(
        previous=EngineRequest(request_id="p0", max_tokens=4, prompt="Q1:"),
        answer=" A1",
        request=EngineRequest(request_id="p1", max_tokens=4, prompt=" Q2:"),
    )
    assert text.prompt == "Q1: A1 Q2:" and text.messages is None


NATIVE_SESSIONS = [
    {"id": "c0", "arrival_s": 0.0, "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}], "session_id": "chat", "turn": 0},
    {"id": "lone", "arrival_s": 0.01, "max_tokens": 8, "prompt": "alone"},
    {"id": "c1", "max_tokens": 8, "messages": [{"role": "user", "content": "tell me more"}], "session_id": "chat", "turn": 1, "think_time_s": 0.03},
    {"id": "c2", "max_tokens": 8, "messages": [{"role": "user", "content": "thanks"}], "session_id": "chat", "turn": 2, "think_time_s": 0.01},
]


@pytest.mark.django_db(transaction=True)
def test_it_runs_an_imported_session_trace_per_arm_and_analyses_it_by_turn(tmp_path, servers, openai_register):
    """End to end: import, run_execute per arm (baseline on server a, candidate on b), results, comparison."""
    import json

    from console.analysis.selectors import comparison_compute_for
    from console.experiments.services import experiment_create
    from console.results.selectors import results_frames
    from console.traces.services import trace_import_path
    from workers.execution import run_execute

    path = tmp_path / "sessions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in NATIVE_SESSIONS))
    trace = trace_import_path(path=path, uploaded_by=None).trace
    for arm, srv in servers.items():
        openai_register(srv.base_url, name=f"arm-{arm}")
    experiment = experiment_create(
        name="sessions",
        trace=trace,
        engine="openai",
        target_model="tiny",
        baseline_engine_args={"server": "arm-a"},
        candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}, "engine_args": {"server": "arm-b"}}],
        repeats=1,
        warmup=0,
    )
    runs = list(experiment.runs.select_related("arm"))
    assert {run_execute(run_id=r.pk) for r in runs} == {"done"}
    for run in runs:
        arm = "a" if run.arm.is_baseline else "b"
        answer = "".join(f" t{i}" for i in range(sum(ARM_TOKENS[arm])))
        served = {r["request_id"]: r for r in servers[arm].requests() if r["request_id"] in {"c0", "c1", "c2", "lone"}}
        assert served["c2"]["messages"] == [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "tell me more"},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "thanks"},
        ]
        results = {r.request_id: r for r in run.results.all()}
        assert results["c1"].scheduled_s == pytest.approx(results["c0"].finish_s + 0.03, abs=1e-9)
    for run in runs:
        run.refresh_from_db()
    requests, _ = results_frames(runs=runs)
    assert sorted(zip(requests["request_id"], requests["session_id"], requests["turn"], strict=True))[:4] == [
        ("c0", "chat", 0),
        ("c0", "chat", 0),
        ("c1", "chat", 1),
        ("c1", "chat", 1),
    ]
    assert set(requests.loc[requests["request_id"] == "lone", "session_id"]) == {"lone"}
    summary = comparison_compute_for(experiment=experiment, runs=runs, n_boot=50)
    by_turn = summary["sessions"]["by_turn"]
    for run in runs:
        rows = {row["turn"]: row for row in by_turn if row["arm"] == run.arm.label}
        assert {turn: row["n_requests"] for turn, row in rows.items()} == {0: 2, 1: 1, 2: 1}
        assert all(row["n_completed"] == row["n_requests"] and row["ttft_s_p50"] > 0 for row in rows.values())
    sessions = {row["arm"]: row for row in summary["sessions"]["by_arm_load"]}
    for row in sessions.values():
        assert row["n_sessions"] == 2 and row["n_multi_turn"] == 1 and row["n_sessions_completed"] == 2
        # the two-turn think times are inside the session's duration
        assert row["session_duration_s_p99"] > 0.04
