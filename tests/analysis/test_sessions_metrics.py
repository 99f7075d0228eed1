"""Per-session and per-turn metrics, against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from console.analysis.metrics import requests_derive
from console.analysis.sessions import session_columns, sessions_aggregate, turns_aggregate
from tests.analysis.builders import frame, request_row


def _turn(request_id: str, session: str, turn: int, scheduled: float, first: float, finish: float, **extra):
    return request_row(
        request_id=request_id,
        session_id=session,
        turn=turn,
        scheduled_s=scheduled,
        sent_s=scheduled,
        first_token_s=first,
        finish_s=finish,
        chunk_times=[first, finish],
        chunk_tokens=[1, 1],
        num_output_tokens=2,
        **extra,
    )


def _derived():
    rows = [
        # session "chat": 3 turns, think times 0.5 and 1.0; TTFT 0.1, 0.2, 0.4 (growing context)
        _turn("c0", "chat", 0, 0.0, 0.1, 1.0),
        _turn("c1", "chat", 1, 1.5, 1.7, 2.5),
        _turn("c2", "chat", 2, 3.5, 3.9, 4.0),
        # a request alone: a session of one turn, 0.5 s long
        _turn("lone", "", 0, 0.2, 0.3, 0.7),
        # session "broken": its turn 1 failed, so the session is not completed and has no duration
        _turn("b0", "broken", 0, 0.4, 0.6, 0.9),
        _turn("b1", "broken", 1, 1.9, float("nan"), float("nan"), error="500 from server", finish_reason=None),
    ]
    return requests_derive(frame(*rows))


def test_it_fills_single_turn_sessions_for_frames_without_sessions():
    plain = frame(request_row(request_id="a"), request_row(request_id="b"))
    out = session_columns(plain)
    assert list(out["session_id"]) == ["a", "b"] and list(out["turn"]) == [0, 0]
    mixed = session_columns(frame(request_row(request_id="a", session_id="", turn=None)))
    assert list(mixed["session_id"]) == ["a"] and list(mixed["turn"]) == [0]


def test_it_computes_session_durations_over_completed_sessions():
    row = sessions_aggregate(_derived(), by=["arm", "load"]).iloc[0]
    assert row["n_sessions"] == 3 and row["n_multi_turn"] == 2 and row["n_sessions_completed"] == 2
    assert row["turns_mean"] == pytest.approx(6 / 3)
    assert row["session_completed_share"] == pytest.approx(2 / 3)
    # durations: chat 4.0 - 0.0 = 4.0 (think times included), lone 0.7 - 0.2 = 0.5
    assert row["session_duration_s_mean"] == pytest.approx(2.25)
    assert row["session_duration_s_p50"] == pytest.approx(2.25)


def test_it_shows_ttft_by_turn():
    rows = turns_aggregate(_derived(), by=["arm"]).set_index("turn")
    assert list(rows["n_requests"]) == [3, 2, 1] and list(rows["n_completed"]) == [3, 1, 1]
    # turn 0: TTFTs 0.1 (chat), 0.1 (lone), 0.2 (broken); turn 1: 0.2 (the failed one has none)
    assert rows.loc[0, "ttft_s_mean"] == pytest.approx((0.1 + 0.1 + 0.2) / 3)
    assert rows.loc[1, "ttft_s_mean"] == pytest.approx(0.2)
    assert rows.loc[2, "ttft_s_p50"] == pytest.approx(0.4)
    assert rows.loc[2, "e2e_s_mean"] == pytest.approx(0.5)


def test_it_keeps_repeats_of_one_session_apart():
    rows = [_turn("c0", "chat", 0, 0.0, 0.1, 1.0, run_id=run) for run in (1, 2)]
    rows += [_turn("c1", "chat", 1, 2.0, 2.1, 3.0, run_id=1), _turn("c1", "chat", 1, 1.0, 1.1, 2.0, run_id=2)]
    row = sessions_aggregate(requests_derive(frame(*rows)), by=["arm"]).iloc[0]
    assert row["n_sessions"] == 2 and row["session_duration_s_mean"] == pytest.approx((3.0 + 2.0) / 2)
    assert not math.isnan(row["session_duration_s_p90"])
