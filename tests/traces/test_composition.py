"""Arrival processes, pairing, train/holdout splits, sorting, duplicates and deletion."""

from __future__ import annotations

import json
import random
import statistics
from itertools import islice

import pytest

from console.traces.arrivals import ArrivalSpecError, arrival_spec_parse, arrivals_generate
from console.traces.models import Trace
from console.traces.pairing import PoolPrompt, PromptPool
from console.traces.services import TraceInUseError, trace_delete, trace_import_path
from console.traces.splits import split_for


def _gaps(spec: str, n: int = 20000, seed: int = 1) -> list[float]:
    times = list(islice(arrivals_generate(arrival_spec_parse(spec), seed=seed), n))
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def test_it_generates_arrival_processes_with_the_asked_rate_and_burstiness():
    assert _gaps("constant:4", 10) == [0.25] * 9
    poisson = _gaps("poisson:2")
    assert statistics.mean(poisson) == pytest.approx(0.5, rel=0.05)
    assert statistics.stdev(poisson) / statistics.mean(poisson) == pytest.approx(1.0, rel=0.05)
    bursty = _gaps("gamma:2:3")
    assert statistics.mean(bursty) == pytest.approx(0.5, rel=0.1)
    assert statistics.stdev(bursty) / statistics.mean(bursty) == pytest.approx(3.0, rel=0.1)
    assert _gaps("poisson:2", 50, seed=3) == _gaps("poisson:2", 50, seed=3) != _gaps("poisson:2", 50, seed=4)


@pytest.mark.parametrize(
    "spec", ["poisson", "poisson:-1", "gamma:1", "gamma:1:0", "uniform:3", "borrow:", "constant:x"]
)
def test_it_rejects_bad_arrival_specs(spec):
    with pytest.raises(ArrivalSpecError):
        arrival_spec_parse(spec)


def test_it_puts_about_the_asked_fraction_in_holdout_independent_of_everything_else():
    ids = [f"req-{i}" for i in range(20000)]
    splits = [split_for(trace_key="seed:0", request_id=i, holdout_fraction=0.3) for i in ids]
    assert splits.count("holdout") / len(ids) == pytest.approx(0.3, abs=0.015)
    shuffled = ids[:]
    random.Random(5).shuffle(shuffled)
    again = {i: split_for(trace_key="seed:0", request_id=i, holdout_fraction=0.3) for i in shuffled}
    assert [again[i] for i in ids] == splits
    assert split_for(trace_key="seed:0", request_id="x", holdout_fraction=0.0) == "train"
    assert split_for(trace_key="seed:0", request_id="x", holdout_fraction=1.0) == "holdout"


def _pool():
    prompts = [
        PoolPrompt(key=f"p{t}-{n}", task=task, tokens=n, prompt="x" * n)
        for t, task in enumerate(["chat", "code"])
        for n in range(10, 200, 10)
    ]
    return PromptPool(label="test", prompts=prompts, nearest=3)


def test_it_pairs_by_task_and_nearest_length_deterministically():
    pool = _pool()
    chosen = pool.match(request_id="a", task="code", input_tokens=101, seed=0)
    assert chosen.task == "code" and chosen.tokens in (90, 100, 110)
    assert all(pool.match(request_id="a", task="code", input_tokens=101, seed=0) == chosen for _ in range(3))
    picks = {pool.match(request_id=str(i), task="code", input_tokens=101, seed=0).tokens for i in range(50)}
    assert picks == {90, 100, 110}
    assert pool.match(request_id="a", task="summarization", input_tokens=5, seed=0).tokens == 10
    assert pool.match(request_id="a", task=None, input_tokens=10**6, seed=0).tokens in (180, 190)


@pytest.mark.django_db
def test_it_pairs_a_timing_trace_the_same_way_for_a_seed(shared_data, engineer, tmp_path):
    trace_file = shared_data / "traces/burstgpt/BurstGPT_1.first400.csv"
    pool = str(shared_data / "prompts/sharegpt/ShareGPT_V3_filtered_500.json")

    def content(trace):
        return list(
            trace.requests.order_by("position").values_list(
                "request_id", "arrival_s", "max_tokens", "messages"
            )
        )

    first = trace_import_path(path=trace_file, uploaded_by=engineer, pair_with=pool, seed=7).trace
    copy = tmp_path / "burst-copy.csv"
    copy.write_bytes(trace_file.read_bytes() + b"\n")  # different bytes, same requests
    second = trace_import_path(path=copy, uploaded_by=engineer, pair_with=pool, seed=7)
    assert not second.created and second.trace == first  # same content: recognised
    other = trace_import_path(path=trace_file, uploaded_by=engineer, pair_with=pool, seed=8).trace
    assert content(first) != content(other)
    # arrivals and output lengths are the trace's own whatever the seed
    assert [r[1:3] for r in content(first)] == [r[1:3] for r in content(other)]
    rows = [line.split(",") for line in trace_file.read_text().splitlines()[1:] if line.split(",")[3] != "0"]
    assert [r[1:3] for r in content(first)] == [(float(r[0]), int(r[3])) for r in rows]
    assert "paired" in first.requests.first().metadata
    assert any("Content is paired" in w for w in first.warnings)


@pytest.mark.django_db
def test_it_borrows_arrivals_from_a_timing_trace(shared_data, engineer):
    prompts = shared_data / "prompts/humaneval/HumanEval.jsonl"
    timing = shared_data / "traces/burstgpt/BurstGPT_1.first400.csv"
    trace = trace_import_path(path=prompts, uploaded_by=engineer, arrival=f"borrow:{timing}").trace
    arrivals = list(trace.requests.order_by("position").values_list("arrival_s", flat=True))
    rows = [line.split(",") for line in timing.read_text().splitlines()[1:]]
    source = sorted(float(r[0]) for r in rows if r[3] != "0")  # failed requests (no output) are skipped
    assert arrivals == [t - source[0] for t in source[:164]]
    assert trace.arrival_spec.startswith("borrow:")


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rows(n=200):
    return [
        {"id": f"r{i}", "arrival_s": i * 0.1, "prompt": f"question {i}", "max_tokens": 8 + i % 5}
        for i in range(n)
    ]


@pytest.mark.django_db
def test_it_keeps_splits_stable_across_reimports_and_file_order(engineer, tmp_path):
    rows = _rows()
    _write(tmp_path / "a.jsonl", rows)
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)
    _write(tmp_path / "b.jsonl", shuffled)
    a = trace_import_path(path=tmp_path / "a.jsonl", uploaded_by=engineer).trace
    splits_a = dict(a.requests.values_list("request_id", "split"))
    a.delete()
    b = trace_import_path(path=tmp_path / "b.jsonl", uploaded_by=engineer).trace
    assert dict(b.requests.values_list("request_id", "split")) == splits_a
    assert 0.15 < list(splits_a.values()).count("holdout") / len(rows) < 0.45
    # unsorted input is sorted by arrival, with a warning and the file order kept in metadata
    ordered = list(b.requests.order_by("position").values_list("request_id", "metadata"))
    assert [r for r, _ in ordered] == [r["id"] for r in rows]
    assert [m["source_index"] for _, m in ordered] == [shuffled.index(r) for r in rows]
    assert any("not sorted" in w for w in b.warnings)


@pytest.mark.django_db
def test_it_recognises_the_same_file_uploaded_twice(engineer, tmp_path):
    _write(tmp_path / "t.jsonl", _rows(20))
    first = trace_import_path(path=tmp_path / "t.jsonl", uploaded_by=engineer)
    second = trace_import_path(path=tmp_path / "t.jsonl", uploaded_by=engineer)
    assert first.created and not second.created
    assert second.trace.pk == first.trace.pk and "already imported" in second.message
    assert Trace.objects.count() == 1
    different_split = trace_import_path(path=tmp_path / "t.jsonl", uploaded_by=engineer, holdout_fraction=0.5)
    assert different_split.created and Trace.objects.count() == 2


@pytest.mark.django_db
def test_it_counts_tokens_with_a_given_tokenizer_or_the_estimate(engineer, tmp_path):
    _write(
        tmp_path / "t.jsonl",
        [{"id": "a", "arrival_s": 0, "prompt": "one two three four five", "max_tokens": 4}],
    )
    estimated = trace_import_path(path=tmp_path / "t.jsonl", uploaded_by=engineer).trace
    assert estimated.requests.get().prompt_tokens == 6  # ceil(23 chars / 4)
    counted = trace_import_path(
        path=tmp_path / "t.jsonl",
        uploaded_by=engineer,
        token_counter=lambda s: len(s.split()),
        token_counter_name="words",
    ).trace
    assert counted.requests.get().prompt_tokens == 5
    assert counted.summary["token_counter"] == "words"


@pytest.mark.django_db
def test_it_refuses_to_delete_a_trace_an_experiment_uses(engineer, tmp_path):
    from console.experiments.models import Experiment
    from tests.experiments.factories import experiment_make

    _write(tmp_path / "t.jsonl", _rows(5))
    trace = trace_import_path(path=tmp_path / "t.jsonl", uploaded_by=engineer).trace
    experiment_make(name="spec on", trace=trace)
    with pytest.raises(TraceInUseError, match="used by 1 experiment"):
        trace_delete(trace=trace)
    assert Trace.objects.filter(pk=trace.pk).exists() and trace.requests.count() == 5
    Experiment.objects.all().delete()
    trace_delete(trace=trace)
    assert not Trace.objects.exists()


@pytest.mark.django_db
def test_it_imports_the_demo_trace_once(engineer):
    from console.traces.services import trace_import_demo

    first = trace_import_demo(uploaded_by=engineer)
    again = trace_import_demo(uploaded_by=None)
    assert first.created and not again.created and again.trace.pk == first.trace.pk
    trace = first.trace
    assert trace.request_count == 30 and not trace.warnings
    tasks = trace.summary["by_task"]
    assert set(tasks) == {"code", "chat", "math", "translation", "tool_call", "json"}
    assert trace.requests.filter(tools__isnull=False).count() == tasks["tool_call"]
    assert trace.requests.filter(response_format__isnull=False).count() == tasks["json"]
    assert max(trace.requests.values_list("max_tokens", flat=True)) <= 96


def test_it_builds_the_demo_trace_deterministically(shared_data, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "demo.jsonl"
    subprocess.run(
        [
            sys.executable,
            str(root / "scripts/build_demo_trace.py"),
            "--data",
            str(shared_data),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == (root / "console/traces/demo/demo_trace.jsonl").read_bytes()


@pytest.mark.django_db
def test_it_rebases_clock_timestamps_even_when_an_early_request_comes_late(engineer, tmp_path):
    lines = [
        {
            "id": "b",
            "timestamp": 1_700_000_010.5,
            "messages": [{"role": "user", "content": "second"}],
            "max_tokens": 4,
        },
        {
            "id": "a",
            "timestamp": 1_700_000_000.0,
            "messages": [{"role": "user", "content": "first"}],
            "max_tokens": 4,
        },
        {
            "id": "c",
            "timestamp": 1_700_000_020.0,
            "messages": [{"role": "user", "content": "third"}],
            "max_tokens": 4,
        },
    ]
    _write(tmp_path / "log.jsonl", lines)
    trace = trace_import_path(path=tmp_path / "log.jsonl", uploaded_by=engineer).trace
    assert trace.source_format == "openai_log"
    stored = list(trace.requests.order_by("position").values_list("request_id", "arrival_s", "metadata"))
    assert [(r, a) for r, a, _ in stored] == [("a", 0.0), ("b", 10.5), ("c", 20.0)]
    assert [m["source_index"] for _, _, m in stored] == [1, 0, 2]
