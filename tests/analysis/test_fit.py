"""The fit assessment's verdicts on hand-built inputs (pure functions: console.analysis.fit_assessment, fit_conditions, fit_stats)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from console.analysis import fit_assessment, fit_conditions, fit_stats
from console.analysis.metrics import requests_derive
from tests.analysis.builders import request_row

CATALOG = {
    "qwen2.5-coder-1.5b": {"family": "qwen2", "size_bytes": 1_100},
    "qwen2.5-coder-0.5b": {"family": "qwen2", "size_bytes": 490},
    "smollm2-135m": {"family": "smollm2", "size_bytes": 98},
}
LEVELS = [{"label": "1x", "rate_multiplier": 1.0, "concurrency": None}, {"label": "2x", "rate_multiplier": 2.0}]


def trace(*, classes=None, limits=(128, 128, 16, 200), recorded=None, rate=2.0) -> dict:
    return {
        "classes": {"interactive": 3, "batch": 1} if classes is None else classes,
        "rate_rps": rate,
        "output_limits": list(limits),
        "recorded_output_tokens": list(recorded) if recorded is not None else [None] * len(limits),
    }


def run_stats(**over) -> dict:
    """One baseline run's cached fit facts, as run_fit_stats leaves them."""
    base = {
        "version": fit_stats.FIT_VERSION,
        "load": "2x",
        "rate_multiplier": 2.0,
        "concurrency_cap": None,
        "repeat": 0,
        "n_requests": 4,
        "n_completed": 4,
        "output_tokens": [100, 90, 80, 10],
        "generation_share": {"interactive": [0.8, 0.9, 0.7], "batch": [0.2]},
        "external_time": False,
        "offered_rps": 4.0,
        "inflight_mean": 2.0,
        "inflight_max": 3,
        "quality": {"json_schema": [10, 10], "tool_call": [0, 0], "reference_answer": [0, 0]},
        "gpu_count": 1,
        "gpu_util_pct": 40.0,
        "gpu_peak_memory_bytes": 10.0,
        "gpu_memory_bytes": 100,
        "kv_cache_usage": None,
        "preemptions": None,
    }
    return base | over


def assess(*, runs=(), target="qwen2.5-coder-1.5b", engine="hf", specs=None, tr=None) -> dict:
    result = fit_assessment.fit_assess(
        trace=tr or trace(),
        engine=engine,
        target_model=target,
        specs=specs if specs is not None else [{"method": "ngram", "num_speculative_tokens": 4}],
        load_levels=LEVELS,
        runs=list(runs),
        catalog=CATALOG,
    )
    return result


def cond(result: dict, name: str) -> dict:
    return next(c for c in result["conditions"] if c["name"] == name)


def test_it_judges_every_condition_before_any_run_from_the_trace_and_configs():
    result = assess()
    assert [c["name"] for c in result["conditions"]] == [n for n, _ in fit_conditions.CONDITIONS]
    assert result["stage"] == "before any run" and result["generation_share"] == []
    quality = cond(result, "quality_bar")
    assert quality["verdict"] == "unknown" and "has not run" in quality["reason"]
    serving = cond(result, "serving_headroom")
    assert serving["verdict"] == "unknown" and "telemetry" in serving["reason"]
    length = cond(result, "output_length")
    # limits 128, 128, 16, 200: three of four reach 64 tokens.
    assert length["numbers"]["source"] == "output limits" and length["numbers"]["share_at_least_min"] == 0.75
    assert length["verdict"] == "likely" and "upper bounds" in length["reason"]
    traffic = cond(result, "interactive_traffic")
    assert traffic["verdict"] == "likely" and traffic["numbers"]["interactive_share"] == 0.75
    assert [lv["offered_rps"] for lv in traffic["numbers"]["loads"]] == [2.0, 4.0]


def test_it_prefers_recorded_output_lengths_and_says_so():
    result = assess(tr=trace(limits=(128, 128, 128, 128), recorded=(10, 20, 30, 128)))
    length = cond(result, "output_length")
    assert length["numbers"]["source"] == "recorded output lengths"
    assert length["numbers"]["share_at_least_min"] == 0.25 and length["verdict"] == "unlikely"
    mixed = cond(assess(tr=trace(limits=(128, 8), recorded=(100, None), classes={"interactive": 2})), "output_length")
    assert mixed["numbers"]["source"].startswith("recorded output lengths (1 of 2)")


def test_it_refines_output_length_with_the_baselines_outputs():
    result = assess(runs=[run_stats(output_tokens=[5, 6, 7, 70])])
    length = cond(result, "output_length")
    assert length["numbers"]["source"] == "baseline outputs" and length["verdict"] == "unlikely"
    assert length["numbers"]["median_tokens"] == 6.5


@pytest.mark.parametrize(
    ("checks", "verdict", "words"),
    [
        ({"json_schema": [10, 10]}, "likely", "10 of 10"),
        ({"json_schema": [10, 5], "reference_answer": [10, 9]}, "unlikely", "14 of 20"),
        ({"json_schema": [0, 0]}, "unknown", "nothing is gradable"),
    ],
)
def test_it_judges_the_quality_bar_on_the_baselines_gradable_outputs(checks, verdict, words):
    quality = cond(assess(runs=[run_stats(quality=checks)]), "quality_bar")
    assert quality["verdict"] == verdict and words in quality["reason"]


@pytest.mark.parametrize(
    ("over", "verdict", "words"),
    [
        ({"gpu_util_pct": 40.0}, "likely", "40%"),
        ({"gpu_util_pct": 95.0}, "unlikely", "compute-saturated"),
        ({"gpu_util_pct": 40.0, "kv_cache_usage": 0.95}, "unlikely", "KV cache is full"),
        ({"gpu_util_pct": None, "gpu_count": 0}, "unknown", "ran on CPU"),
    ],
)
def test_it_judges_serving_headroom_at_the_heaviest_load(over, verdict, words):
    runs = [run_stats(load="1x", gpu_util_pct=10.0), run_stats(**over)]
    serving = cond(assess(runs=runs), "serving_headroom")
    assert serving["verdict"] == verdict and words in serving["reason"]
    assert serving["numbers"]["judged_at"] == "2x"


def test_it_judges_traffic_by_class_mix_and_measured_concurrency():
    batchy = cond(assess(tr=trace(classes={"interactive": 1, "batch": 3})), "interactive_traffic")
    assert batchy["verdict"] == "unlikely" and "25%" in batchy["reason"]
    busy = cond(assess(runs=[run_stats(inflight_mean=40.0, inflight_max=64)]), "interactive_traffic")
    assert busy["verdict"] == "unlikely" and "40.0 requests in flight" in busy["reason"]
    calm = cond(assess(runs=[run_stats(inflight_mean=2.0)]), "interactive_traffic")
    assert calm["verdict"] == "likely"
    row = next(lv for lv in calm["numbers"]["loads"] if lv["load"] == "2x")
    assert row["measured_offered_rps"] == 4.0 and row["inflight_max"] == 3
    empty = cond(assess(tr=trace(classes={}, limits=())), "interactive_traffic")
    assert empty["verdict"] == "unknown"


def test_it_names_the_proposers_this_engine_and_target_have():
    likely = cond(assess(), "proposer")
    names = {p["proposer"]: p for p in likely["numbers"]["proposers"]}
    assert likely["verdict"] == "likely" and set(names) == {"ngram", "qwen2.5-coder-0.5b"}
    assert names["ngram"]["configured"] and names["qwen2.5-coder-0.5b"]["source"] == "model catalog"
    cross = cond(assess(target="smollm2-135m", specs=[{"method": "draft_model", "model": "qwen2.5-coder-0.5b"}]), "proposer")
    assert cross["verdict"] == "unlikely"
    draft = next(p for p in cross["numbers"]["proposers"] if p["proposer"] == "qwen2.5-coder-0.5b")
    assert "cross-vocabulary" in draft["kind"] and "greedy-only" in draft["note"]
    unknown = cond(assess(target="meta-llama/Llama-3.1-8B", engine="vllm"), "proposer")
    assert unknown["verdict"] == "unknown" and "does not know" in unknown["reason"]
    eagle = cond(assess(target="meta-llama/Llama-3.1-8B", engine="vllm", specs=[{"method": "eagle3"}]), "proposer")
    assert eagle["verdict"] == "likely" and any(p["kind"] == "EAGLE3 head" for p in eagle["numbers"]["proposers"])


def test_it_warns_where_generation_is_under_half_of_end_to_end_latency():
    shares = fit_conditions.generation_share([run_stats(), run_stats(load="1x", generation_share={"batch": [0.3, 0.4]})])
    by_class = {g["traffic_class"]: g for g in shares}
    assert by_class["interactive"]["median"] == pytest.approx(0.8) and by_class["interactive"]["warning"] is None
    batch = by_class["batch"]
    assert batch["n"] == 3 and batch["median"] == pytest.approx(0.3)
    assert "cannot move end-to-end latency much" in batch["warning"]
    assert {b["load"] for b in batch["by_load"]} == {"1x", "2x"}


def test_it_reduces_a_stored_run_with_external_time_reference_answers_and_validity():
    rows = [
        # ttft 0.5, e2e 1.1 (scheduled 0): generation 0.6 s; 0.9 s of retrieval makes e2e 2.0.
        request_row(request_id="a", output_text="so the answer is 1,234"),
        request_row(request_id="b", traffic_class="batch", output_text="42", json_valid=True, schema_valid=False),
        request_row(request_id="c", error="boom", finish_s=np.nan, first_token_s=np.nan, finish_reason=None),
    ]
    frame = pd.DataFrame(rows)
    for col in ("json_valid", "schema_valid", "tool_call_valid"):
        frame[col] = frame.get(col)
    derived = requests_derive(frame)
    stats = fit_stats.run_fit_stats(
        derived,
        metadata={"a": {"reference_answer": "1234", "retrieval_s": 0.9}, "b": {}, "c": {"reference_answer": 7}},
        telemetry={"mean_util": None, "counters": {}},
        hardware={"gpus": []},
        run={"load": "1x", "rate_multiplier": 1.0, "concurrency_cap": None, "repeat": 0},
    )
    assert stats["generation_share"]["interactive"] == [pytest.approx(0.3)]
    assert stats["generation_share"]["batch"] == [pytest.approx(0.6 / 1.1, abs=1e-4)]
    assert stats["external_time"] is True
    assert stats["quality"]["reference_answer"] == [2, 1]  # a right, c failed
    assert stats["quality"]["json_schema"] == [1, 0]
    assert stats["n_completed"] == 2 and stats["output_tokens"] == [4, 4]
    assert stats["inflight_mean"] == pytest.approx(2.0) and stats["inflight_max"] == 2


def test_it_counts_requests_in_flight():
    assert fit_stats.inflight([0.0, 0.5, 2.0], [1.0, 1.5, 3.0]) == (pytest.approx(3.0 / 3.0), 2)
    assert fit_stats.inflight([], []) == (None, None)


def test_it_reads_recorded_lengths_and_external_time_from_metadata():
    assert fit_stats.recorded_output_tokens({"paired": {"trace_output_tokens": 300}}) == 300
    assert fit_stats.recorded_output_tokens({"output_tokens": 12.0}) == 12
    assert fit_stats.recorded_output_tokens({"output_tokens": "many"}) is None
    assert fit_stats.external_seconds({"retrieval_s": 0.5, "tool_s": 1.0, "external_s": "x"}) == 1.5
    assert fit_stats.external_seconds({"retrieval_s": -1, "tool_s": float("nan")}) == 0.0
    assert fit_stats.answer_correct("3 apples then 18", "18") is True
    assert fit_stats.answer_correct("no number", 18) is False
    assert fit_stats.answer_correct("18", "eighteen") is None
    # Hostile metadata grades nothing rather than failing the summary.
    assert fit_stats.answer_correct("nan", "nan") is None and fit_stats.answer_correct("1", {"x": 1}) is None
    assert fit_stats.external_seconds({"retrieval_s": True, "tool_s": "1e308"}) == 0.0
    assert fit_stats.external_seconds(["not", "a", "mapping"]) == 0.0  # type: ignore[arg-type]
