"""Every slice of the comparison: its own paired intervals and noise floor, "not measured" when
the slice is small, the session-turn slice only for multi-turn traces, per-class goodput, the
first divergences, and the page-side reading of the stored slices (console.analysis.slice_view)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from console.analysis import slice_view
from console.analysis.comparison import comparison_compute
from console.analysis.metrics import requests_derive
from console.analysis.quality_pairs import exact_match, first_divergences
from console.analysis.slices import TURN_DIMENSION, slice_dimensions, slices_assign
from tests.analysis.builders import frame, request_row, synthetic_experiment

TIMING = ["first_token_s", "finish_s", "chunk_times", "chunk_tokens", "num_output_tokens", "output_token_ids"]


def _code_as_fast_as_base(requests: pd.DataFrame) -> pd.DataFrame:
    """The candidate's code requests get the baseline's timings (no effect there), and requests
    r0..r4 become a task of their own ("rare": 5 requests)."""
    out = requests.copy()
    keys = ["load", "repeat", "request_id"]
    base = out[out["arm"] == "base"].set_index(keys)
    spec_code = (out["arm"] == "spec") & (out["task"] == "code")
    idx = pd.MultiIndex.from_frame(out.loc[spec_code, keys])
    for col in TIMING:
        out.loc[spec_code, col] = pd.Series(list(base[col].reindex(idx)), index=out.index[spec_code])
    out.loc[out["request_id"].isin([f"r{i}" for i in range(5)]), "task"] = "rare"
    return out


@pytest.fixture(scope="module")
def experiment():
    requests, runs = synthetic_experiment(n_requests=150, arms={"base": 1.0, "spec": 0.6}, repeats=2, seed=5)
    return _code_as_fast_as_base(requests), runs


@pytest.fixture(scope="module")
def deadlines(experiment):
    requests, _ = experiment
    base = requests_derive(requests[requests["arm"] == "base"])
    # About half the baseline's interactive requests meet it; the faster candidate more.
    e2e = float(base.loc[base["traffic_class"] == "interactive", "e2e_s"].median())
    return {"interactive": {"e2e_s": e2e}, "batch": {"e2e_s": 600.0}}


@pytest.fixture(scope="module")
def summary(experiment, deadlines):
    requests, runs = experiment
    return comparison_compute(requests, runs, deadlines=deadlines, cost_per_hour_usd=1.0, n_boot=300, seed=2)


def _slice(summary, dim, value, arm="spec"):
    return next(r for r in summary["slices"] if (r["dimension"], r["value"], r["arm"]) == (dim, value, arm))


def _delta(row, metric, stat):
    return next(d for d in row["deltas"] if (d["metric"], d["stat"]) == (metric, stat))


def test_it_gives_each_slice_its_own_paired_interval_and_noise_floor(summary):
    headline = _delta(next(h for h in summary["headline"] if h["arm"] == "spec"), "tpot_s", "mean")
    chat = _delta(_slice(summary, "task", "chat"), "tpot_s", "mean")
    code = _delta(_slice(summary, "task", "code"), "tpot_s", "mean")
    assert chat["verdict"] == "better" and chat["delta_hi"] < 0
    # Same timings in both arms: no difference, whatever the other tasks do.
    assert code["delta"] == pytest.approx(0.0, abs=1e-12) and code["verdict"] == "not distinguishable"
    assert (chat["delta_lo"], chat["delta_hi"]) != (headline["delta_lo"], headline["delta_hi"])
    assert 0 < chat["n_requests"] < headline["n_requests"]
    floor = next(
        f
        for f in summary["noise_floor"]
        if (f["dimension"], f["value"], f["metric"], f["stat"]) == ("task", "chat", "tpot_s", "mean")
    )
    assert chat["noise_floor"] == floor["noise_floor"] is not None
    # Every slice dimension carries the headline table's compared statistics.
    for dim in ("task", "traffic_class", "prompt_bucket", "output_bucket"):
        row = next(r for r in summary["slices"] if r["dimension"] == dim and r["arm"] == "spec")
        assert {("ttft_s", "p95"), ("tpot_s", "p50"), ("tpot_s", "p95"), ("e2e_s", "p95"), ("e2e_s", "p99")} <= {
            (d["metric"], d["stat"]) for d in row["deltas"]
        }


def test_it_reads_not_measured_in_a_slice_too_small_for_a_statistic(summary):
    rare = _slice(summary, "task", "rare")
    mean = _delta(rare, "tpot_s", "mean")
    assert mean["n_requests"] == 5
    assert mean["measured"] is False and mean["verdict"] == "not measured"
    assert "n too small" in mean["reason"] and mean["delta_lo"] is None
    # 150 requests in the experiment: enough for a p95 there, not for a p99 (200).
    assert _delta(next(h for h in summary["headline"] if h["arm"] == "spec"), "e2e_s", "p99")["verdict"] == "not measured"


def test_it_compares_each_traffic_class_goodput_with_an_interval(experiment, deadlines, summary):
    requests, runs = experiment
    derived = requests_derive(requests, deadlines=deadlines)
    base_wall = runs[runs["arm"] == "base"].set_index("repeat")["wall_s"]

    def goodput_over_base_time(arm):
        # Class requests within their deadline per second of the baseline's run, mean over repeats.
        rows = derived[(derived["arm"] == arm) & (derived["traffic_class"] == "interactive")]
        return np.mean([g["met_deadline"].sum() / base_wall[rep] for rep, g in rows.groupby("repeat")])

    goodput = _delta(_slice(summary, "traffic_class", "interactive"), "class_goodput_rps", "mean")
    assert goodput["base"] == pytest.approx(goodput_over_base_time("base"))
    assert goodput["cand"] == pytest.approx(goodput_over_base_time("spec"))
    assert goodput["measured"] and goodput["delta_lo"] > 0 and goodput["verdict"] == "better"
    # Every batch request meets its 600 s deadline in both arms: the candidate's shorter runs alone
    # earn it no goodput.
    batch = _delta(_slice(summary, "traffic_class", "batch"), "class_goodput_rps", "mean")
    assert batch["delta"] == pytest.approx(0.0, abs=1e-12) and batch["verdict"] == "not distinguishable"
    rows = slice_view.class_goodput_rows(summary)
    assert {(r["traffic_class"], r["arm"]) for r in rows} == {
        (c, a) for c in ("interactive", "batch") for a in ("base", "spec")
    }
    assert next(r for r in rows if r["arm"] == "spec" and r["traffic_class"] == "interactive")["delta"] == goodput
    assert next(r for r in rows if r["arm"] == "base" and r["traffic_class"] == "interactive")["delta"] is None


def test_it_slices_by_session_turn_only_when_the_trace_has_turns():
    requests, runs = synthetic_experiment(n_requests=60, repeats=1, seed=3)
    assert TURN_DIMENSION not in slice_dimensions(slices_assign(requests, baseline_arm="base"))
    single = requests.assign(turn=0)
    assert TURN_DIMENSION not in slice_dimensions(slices_assign(single, baseline_arm="base"))
    turns = requests.assign(turn=requests["request_id"].str[1:].astype(int) % 6)
    assigned = slices_assign(turns, baseline_arm="base")
    assert TURN_DIMENSION in slice_dimensions(assigned)
    assert set(assigned[TURN_DIMENSION]) == {"0", "1", "2", "3+"}
    summary = comparison_compute(turns, runs, deadlines=None, cost_per_hour_usd=1.0, n_boot=100)
    assert summary["slice_dimensions"][-1] == TURN_DIMENSION
    late = _slice(summary, TURN_DIMENSION, "3+")
    assert late["n_requests"] == 30 and _delta(late, "tpot_s", "mean")["measured"]
    assert {o["key"] for g in slice_view.slice_options(summary) for o in g["options"]} >= {"turn_bucket:3+"}
    plain = comparison_compute(requests, runs, deadlines=None, cost_per_hour_usd=1.0, n_boot=100)
    assert TURN_DIMENSION not in plain["slice_dimensions"]


def test_it_lists_where_each_candidate_output_first_diverges():
    rows = frame(
        request_row(result_id=10, output_token_ids=[5, 6, 7, 8], output_text="the cat sat"),
        request_row(result_id=11, run_id=2, arm="spec", is_baseline=False, output_token_ids=[5, 6, 9, 9], output_text="the dog ran"),
        request_row(result_id=12, request_id="r2", output_token_ids=[1], output_text="same"),
        request_row(result_id=13, request_id="r2", run_id=2, arm="spec", is_baseline=False, output_token_ids=[1], output_text="same"),
    )
    flagged = pd.concat([rows, exact_match(rows, baseline_arm="base")], axis=1)
    out = first_divergences(flagged, baseline_arm="base")
    assert out.to_dict("records") == [
        {
            "arm": "spec",
            "load": "1x",
            "request_id": "r1",
            "repeat": 0,
            "task": "chat",
            "position": 2,
            "context": "the ",
            "baseline_text": "cat sat",
            "candidate_text": "dog ran",
            "baseline_result_id": 10,
            "candidate_result_id": 11,
        }
    ]


def test_it_reads_a_slice_from_the_query_and_refuses_an_unknown_one(summary):
    assert slice_view.slice_parse(summary, None) is None and slice_view.slice_parse(summary, "all") is None
    assert slice_view.slice_parse(summary, "task:chat") == ("task", "chat")
    with pytest.raises(slice_view.SliceError, match=r"'task:nope' is not a slice of this comparison"):
        slice_view.slice_parse(summary, "task:nope")
    rows = slice_view.slice_rows(summary, ("task", "rare"))
    assert [(r["arm"], r["is_baseline"]) for r in rows] == [("base", True), ("spec", False)]
    assert all(r["n_requests"] == 10 for r in rows)  # 5 requests x 2 repeats
    groups = {g["dimension"]: g for g in slice_view.slice_options(summary)}
    assert list(groups) == ["task", "traffic_class", "output_bucket", "prompt_bucket"]
    assert {o["value"]: o["n_requests"] for o in groups["task"]["options"]}["rare"] == 5  # distinct requests
    cdf = slice_view.slice_cdf_series(summary, ("task", "rare"), metric="e2e_s")
    assert len(cdf) == 2 and len(cdf[0]["x"]) == len(cdf[0]["y"]) == 41
