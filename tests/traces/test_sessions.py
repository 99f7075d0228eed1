"""Sessions in traces: native session fields and their located errors, multi-turn prompt sets
imported with --turns all, think-time distributions, and splits that keep sessions whole."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command

from console.traces.models import Trace, TraceRequest
from console.traces.sessions import ThinkTimeSpecError, think_time_spec_parse

pytestmark = pytest.mark.django_db

MT_BENCH = [
    {"question_id": 81, "category": "writing", "turns": ["Write a travel blog post.", "Rewrite it in limericks."]},
    {"question_id": 111, "category": "math", "turns": ["Area of a triangle?", "Area of its circumcircle?"]},
    {"question_id": 160, "category": "humanities", "turns": ["Suggest five documentaries."]},
]
SHAREGPT = [
    {
        "id": "conv-a",
        "conversations": [
            {"from": "human", "value": "Hi, what is RAG?"},
            {"from": "gpt", "value": "RECORDED ANSWER 1"},
            {"from": "human", "value": "And speculative decoding?"},
            {"from": "gpt", "value": "RECORDED ANSWER 2"},
            {"from": "human", "value": "Which is faster?"},
            {"from": "gpt", "value": "RECORDED ANSWER 3"},
        ],
    },
    {"id": "conv-b", "conversations": [{"from": "human", "value": "One question only"}, {"from": "gpt", "value": "x"}]},
]


def _write(tmp_path: Path, name: str, rows: list, *, array: bool = False) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(rows) if array else "".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _requests(trace: Trace) -> list[TraceRequest]:
    return list(trace.requests.order_by("position"))


def test_it_imports_every_mt_bench_turn_as_a_session_with_seeded_think_times(tmp_path, capsys):
    path = _write(tmp_path, "mt_bench.jsonl", MT_BENCH)
    call_command("import_trace", path, "--turns", "all", "--think-time", "exp:5", "--seed", "7", "--arrival", "poisson:2")
    trace = Trace.objects.get()
    rows = _requests(trace)
    assert [(r.session_id, r.turn, r.request_id) for r in rows] == [
        ("81", 0, "81"),
        ("81", 1, "81-turn1"),
        ("111", 0, "111"),
        ("111", 1, "111-turn1"),
        ("160", 0, "160"),
    ]
    by_id = {r.request_id: r for r in rows}
    # a later turn holds only its own new message: the replay puts the conversation before it
    assert by_id["81-turn1"].messages == [{"role": "user", "content": "Rewrite it in limericks."}]
    assert by_id["111-turn1"].task == "math" and "later_turns" not in by_id["81"].metadata
    # later turns sit at their session's start (nominal): arrivals drew one value per session
    assert by_id["81-turn1"].arrival_s == by_id["81"].arrival_s
    assert by_id["111-turn1"].arrival_s == by_id["111"].arrival_s > 0
    thinks = [by_id["81-turn1"].think_time_s, by_id["111-turn1"].think_time_s]
    assert all(t > 0 and math.isfinite(t) for t in thinks) and thinks[0] != thinks[1]
    assert by_id["81"].think_time_s == 0.0
    spec = think_time_spec_parse("exp:5")
    assert thinks[0] == spec.sample(seed=7, session_id="81", turn=1)
    assert trace.summary["sessions"] == 3 and trace.summary["multi_turn_sessions"] == 2
    assert trace.metadata["import_options"]["turns"] == "all"
    assert any("think times" in w and "exp:5 (seed 7)" in w for w in trace.warnings)
    # the same file with another seed: other think times, the same sessions
    call_command("import_trace", path, "--turns", "all", "--think-time", "exp:5", "--seed", "8", "--arrival", "poisson:2")
    other = Trace.objects.exclude(pk=trace.pk).get()
    assert other.requests.get(request_id="81-turn1").think_time_s != thinks[0]


def test_it_keeps_the_first_turn_only_by_default(tmp_path):
    call_command("import_trace", _write(tmp_path, "mt_bench.jsonl", MT_BENCH))
    rows = _requests(Trace.objects.get())
    assert [(r.request_id, r.session_id, r.turn) for r in rows] == [("81", "81", 0), ("111", "111", 0), ("160", "160", 0)]
    assert rows[0].metadata["later_turns"] == ["Rewrite it in limericks."]


def test_it_imports_sharegpt_human_turns_as_sessions_without_the_recorded_answers(tmp_path):
    path = _write(tmp_path, "sharegpt.json", SHAREGPT, array=True)
    call_command("import_trace", path, "--turns", "all", "--think-time", "const:2.5", "--arrival", "constant:1")
    rows = _requests(Trace.objects.get())
    assert [(r.request_id, r.session_id, r.turn, r.think_time_s) for r in rows] == [
        ("conv-a", "conv-a", 0, 0.0),
        ("conv-a-turn1", "conv-a", 1, 2.5),
        ("conv-a-turn2", "conv-a", 2, 2.5),
        ("conv-b", "conv-b", 0, 0.0),
    ]
    assert [r.messages for r in rows[:3]] == [
        [{"role": "user", "content": "Hi, what is RAG?"}],
        [{"role": "user", "content": "And speculative decoding?"}],
        [{"role": "user", "content": "Which is faster?"}],
    ]
    assert "RECORDED" not in json.dumps([r.messages for r in rows] + [r.metadata for r in rows])


def test_it_keeps_every_session_whole_in_one_split(tmp_path):
    sessions = [
        {"question_id": f"q{i}", "category": "writing", "turns": [f"first {i}", f"second {i}", f"third {i}"]}
        for i in range(60)
    ]
    call_command("import_trace", _write(tmp_path, "many.jsonl", sessions), "--turns", "all", "--holdout", "0.5")
    splits: dict[str, set[str]] = {}
    for session_id, split in TraceRequest.objects.values_list("session_id", "split"):
        splits.setdefault(session_id, set()).add(split)
    assert len(splits) == 60 and all(len(s) == 1 for s in splits.values())
    assert {next(iter(s)) for s in splits.values()} == {"train", "holdout"}
    assert TraceRequest.objects.count() == 180


NATIVE_OK = [
    {"id": "a0", "arrival_s": 0.5, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "session_id": "A", "turn": 0},
    {"id": "b0", "arrival_s": 1.0, "max_tokens": 8, "prompt": "lone"},
    {"id": "a1", "max_tokens": 8, "messages": [{"role": "user", "content": "more"}], "session_id": "A", "turn": 1, "think_time_s": 3.0},
    {"id": "a2", "max_tokens": 8, "messages": [{"role": "user", "content": "again"}], "session_id": "A", "turn": 2},
]


def test_it_stores_native_session_fields_and_fills_missing_think_times(tmp_path):
    call_command("import_trace", _write(tmp_path, "native.jsonl", NATIVE_OK), "--think-time", "const:1.5")
    rows = {r.request_id: r for r in _requests(Trace.objects.get())}
    assert (rows["a1"].session_id, rows["a1"].turn, rows["a1"].think_time_s) == ("A", 1, 3.0)  # the file's own
    assert rows["a2"].think_time_s == 1.5  # the distribution, where the file gives none
    assert rows["a2"].arrival_s == rows["a0"].arrival_s == 0.5  # nominal: the session's start
    assert (rows["b0"].session_id, rows["b0"].turn, rows["b0"].think_time_s) == ("b0", 0, 0.0)
    assert rows["a0"].split == rows["a1"].split == rows["a2"].split


def _turn(request_id: str, session: str, turn: int, **extra) -> dict:
    row = {"id": request_id, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "session_id": session}
    row |= {"turn": turn, **extra}
    if turn == 0:
        row.setdefault("arrival_s", 0.0)
    return row


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (
            [_turn("a0", "A", 0), _turn("a1", "A", 1), _turn("a1b", "A", 1)],
            "bad.jsonl:3: turn: duplicate turn 1 of session 'A' (line 2 has it already)",
        ),
        (
            [_turn("a0", "A", 0), _turn("a1", "A", 1), _turn("a3", "A", 3)],
            "bad.jsonl:3: turn: session 'A' skips from turn 1 to turn 3: turn 2 is missing",
        ),
        (
            [_turn("a0", "A", 0), _turn("a1", "A", 1, think_time_s=-2)],
            "bad.jsonl:2: think_time_s: must be >= 0, got -2",
        ),
        (
            [_turn("b0", "B", 0), _turn("a1", "A", 1, arrival_s=1.0), _turn("a2", "A", 2, arrival_s=2.0)],
            "bad.jsonl:2: turn: session 'A' has no turn 0: turn 1 is its earliest",
        ),
        (
            [_turn("a1", "A", 1), _turn("a0", "A", 0)],
            "bad.jsonl:1: arrival_s: is missing, and no turn 0 with session_id 'A' is before this line",
        ),
        (
            [{"id": "x", "max_tokens": 8, "prompt": "p", "turn": 1}],
            "bad.jsonl:1: session_id: is required for a later turn (turn 1)",
        ),
        (
            [{"id": "x", "max_tokens": 8, "prompt": "p"}],
            "bad.jsonl:1: arrival_s: is required for a request that is the first turn (turn 0)",
        ),
        (
            [_turn("a0", "A", 0, think_time_s=1.0)],
            "bad.jsonl:1: think_time_s: is for later turns only",
        ),
    ],
)
def test_it_refuses_broken_sessions_with_located_errors(tmp_path, capsys, rows, expected):
    with pytest.raises(SystemExit) as exit_info:
        call_command("import_trace", _write(tmp_path, "bad.jsonl", rows))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and "nothing was stored" in err, err
    assert not Trace.objects.exists() and not TraceRequest.objects.exists()


@pytest.mark.parametrize(
    ("spec", "message"),
    [("exp:0", "> 0"), ("const:-1", ">= 0"), ("gauss:3", "not a think-time distribution"), ("exp:x", "SECONDS")],
)
def test_it_refuses_bad_think_time_specs(spec, message):
    with pytest.raises(ThinkTimeSpecError, match=message):
        think_time_spec_parse(spec)


def test_it_exits_2_on_a_bad_think_time_option(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        call_command("import_trace", _write(tmp_path, "mt.jsonl", MT_BENCH), "--turns", "all", "--think-time", "exp:-1")
    assert exit_info.value.code == 2
    assert "think_time: 'exp:-1'" in capsys.readouterr().err and not Trace.objects.exists()


def test_it_takes_turns_and_think_time_on_the_api_and_refuses_bad_ones_with_400(client, engineer, api_token_for):
    auth = api_token_for(engineer)
    body = "".join(json.dumps(r) + "\n" for r in MT_BENCH).encode()
    response = client.post(
        "/api/traces",
        {"file": SimpleUploadedFile("mt.jsonl", body), "turns": "all", "think_time": "const:2"},
        **auth,
    )
    assert response.status_code == 201, response.content
    trace_id = response.json()["trace"]["id"]
    rows = client.get(f"/api/traces/{trace_id}/requests", **auth).json()["requests"]
    assert [(r["session_id"], r["turn"], r["think_time_s"]) for r in rows][:2] == [("81", 0, 0.0), ("81", 1, 2.0)]
    bad = client.post(
        "/api/traces",
        {"file": SimpleUploadedFile("mt.jsonl", body), "turns": "all", "think_time": "soon"},
        **auth,
    )
    assert bad.status_code == 400 and "think_time" in bad.content.decode()
    wrong = client.post("/api/traces", {"file": SimpleUploadedFile("mt.jsonl", body), "turns": "every"}, **auth)
    assert wrong.status_code == 400
    assert Trace.objects.count() == 1


def _page_upload(client, content: bytes, **fields):
    data = {
        "file": SimpleUploadedFile("mt.jsonl", content),
        "holdout_fraction": "0.3",
        "seed": "0",
        "default_max_tokens": "64",
        **fields,
    }
    return client.post("/traces/upload/", data)


def test_it_takes_turns_and_think_time_on_the_upload_page(engineer_client):
    body = "".join(json.dumps(r) + "\n" for r in MT_BENCH).encode()
    bad = _page_upload(engineer_client, body, turns="all", think_time="exp:soon")
    assert bad.status_code == 400 and "use exp:SECONDS" in bad.content.decode()
    assert not Trace.objects.exists()
    response = _page_upload(engineer_client, body, turns="all", think_time="exp:4")
    assert response.status_code == 302, response.content[:500]
    trace = Trace.objects.get()
    assert trace.requests.filter(turn=1).count() == 2
    assert trace.metadata["import_options"]["think_time"] == "exp:4"


def test_it_borrows_only_session_starts_as_arrivals(tmp_path, capsys):
    call_command("import_trace", _write(tmp_path, "native.jsonl", NATIVE_OK))
    source = Trace.objects.get()
    prompts = _write(tmp_path, "prompts.json", ["p1", "p2"], array=True)
    call_command("import_trace", prompts, "--arrival", f"borrow:{source.pk}")
    borrowed = Trace.objects.exclude(pk=source.pk).get()
    # NATIVE_OK starts two sessions (at 0.5 and 1.0); its later turns are not arrivals
    assert [r.arrival_s for r in _requests(borrowed)] == [0.0, 0.5]


def test_it_takes_a_lone_request_as_turn_0_of_the_session_named_after_it(tmp_path):
    rows = [
        {"id": "a", "arrival_s": 0.0, "max_tokens": 8, "prompt": "first"},
        {"id": "a-1", "arrival_s": 0.0, "max_tokens": 8, "prompt": "second", "session_id": "a", "turn": 1},
    ]
    call_command("import_trace", _write(tmp_path, "implicit.jsonl", rows))
    trace = Trace.objects.get()
    assert [(r.session_id, r.turn) for r in _requests(trace)] == [("a", 0), ("a", 1)]
    assert trace.summary["sessions"] == 1 and trace.summary["turns_max"] == 2


@pytest.mark.parametrize("turn", ["abc", [1], {"n": 1}])
def test_it_refuses_a_turn_that_is_no_integer_on_its_line_instead_of_crashing(tmp_path, capsys, turn):
    rows = [{"id": "t", "arrival_s": 0.0, "max_tokens": 8, "prompt": "p", "session_id": "s", "turn": turn}]
    with pytest.raises(SystemExit) as exit_info:
        call_command("import_trace", _write(tmp_path, "bad.jsonl", rows))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:1: turn:" in err and "nothing was stored" in err, err
    assert not Trace.objects.exists() and not TraceRequest.objects.exists()
