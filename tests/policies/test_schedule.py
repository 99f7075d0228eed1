"""Draft length by batch size (console.policies.schedule): bands from a real comparison of a
synthetic sweep, and hand-built summaries for each rule's edge (docs/policies.md)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from console.analysis.comparison import comparison_compute
from console.analysis.comparison.paired import verdict
from console.analysis.comparison.schema import Summary, summary_load
from console.policies.schedule import (
    ENGINE_SOURCE,
    REPLAY_SOURCE,
    LoadChoice,
    ScheduleError,
    bands_build,
    batch_sizes_replay,
    schedule_derive,
    schedule_point_best,
)
from tests.analysis.builders import synthetic_experiment
from tests.decisions.factories import ENDPOINTS, summary_make

DOCS = Path(__file__).resolve().parents[2] / "docs" / "policies.md"
CONFIGS = {
    "base": None,
    "k2": {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4},
    "k4": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
}


# --- a real comparison of a synthetic sweep -----------------------------------------------------


def sweep_summary(
    *, batch: dict[str, float], speed: dict[str, dict[str, float]], noise=None, n_boot=300
) -> Summary:
    """The stored comparison of a baseline and an n-gram sweep (k2, k4) over ``batch``'s loads
    (``tests.analysis.builders.synthetic_experiment``, 120 requests, 2 repeats), each arm's
    decode time at each load scaled by ``speed[arm][load]`` (times ``noise[(arm, load)]``, a
    per-request lognormal sd), the engine's mean running requests per load ``batch[load]``
    (the candidates' 0.8 of it), computed by ``comparison_compute``."""
    requests, runs = synthetic_experiment(
        n_requests=120,
        arms={"base": 1.0, "k2": 1.0, "k4": 1.0},
        k={"k2": 2, "k4": 4},
        loads=tuple(batch),
        seed=7,
    )
    rng = np.random.default_rng(11)
    times, finishes = [], []
    for row in requests.itertuples():
        m = speed.get(row.arm, {}).get(row.load, 1.0)
        if sd := (noise or {}).get((row.arm, row.load)):
            m *= rng.lognormal(-sd * sd / 2, sd)
        first = row.chunk_times[0] if row.chunk_times else None
        times.append([first + (t - first) * m for t in row.chunk_times] if row.chunk_times else [])
        finishes.append(times[-1][-1] if times[-1] else row.finish_s)
    requests["chunk_times"], requests["finish_s"] = times, finishes
    runs["spec_counters"] = [
        {"kv": {"running_mean": batch[load] * (1.0 if arm == "base" else 0.8)}}
        for arm, load in zip(runs["arm"], runs["load"], strict=True)
    ]
    comparison = comparison_compute(
        requests,
        runs,
        deadlines=None,
        cost_per_hour_usd=1.0,
        sweeps={"ngram": {"k2": 2, "k4": 4}},
        n_boot=n_boot,
    )
    stored = {"arm_order": ["base", "k2", "k4"], "load_order": list(batch), "load_weights": {}, "key": "test"}
    return summary_load(comparison | stored)


ACCEPTANCE_BATCH = {"1x": 2.0, "2x": 4.0, "3x": 6.0, "4x": 9.0, "5x": 12.0}
ACCEPTANCE_SPEED = {
    "k2": {"1x": 0.8, "2x": 0.8, "3x": 0.85, "4x": 1.2, "5x": 1.3},
    "k4": {"1x": 0.6, "2x": 0.65, "3x": 0.7, "4x": 1.3, "5x": 1.5},
}
# docs/policies.md, "Draft length by batch size": the worked example.
DOC_BATCH = {"1x": 1.6, "2x": 3.2, "3x": 6.1, "4x": 8.4, "5x": 11.8}
DOC_SPEED = {
    "k2": {"1x": 0.8, "2x": 0.8, "3x": 0.84, "4x": 1.0, "5x": 1.2},
    "k4": {"1x": 0.6, "2x": 0.65, "3x": 0.72, "4x": 0.96, "5x": 1.3},
}
DOC_NOISE = {("k4", "3x"): 0.3}


@pytest.fixture(scope="module")
def acceptance() -> Summary:
    return sweep_summary(batch=ACCEPTANCE_BATCH, speed=ACCEPTANCE_SPEED)


@pytest.fixture(scope="module")
def doc_example() -> Summary:
    return sweep_summary(batch=DOC_BATCH, speed=DOC_SPEED, noise=DOC_NOISE, n_boot=1000)


def _bands(result) -> list[tuple[int, int, int, str]]:
    return [(b.start, b.end, b.k, b.evidence) for b in result.bands]


def test_it_turns_k4_on_below_batch_size_8_and_off_above(acceptance):
    result = schedule_derive(acceptance, speculative_configs=CONFIGS)
    assert result.schedule == ((1, 7, 4), (8, 1024, 0))
    assert _bands(result) == [
        (1, 1, 4, "below_observed"),
        (2, 7, 4, "observed"),
        (8, 12, 0, "observed"),
        (13, 1024, 0, "beyond_observed"),
    ]
    assert result.speculative_config == {
        "method": "ngram",
        "prompt_lookup_max": 4,
        "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 7, 4], [8, 1024, 0]],
    }
    assert result.sweep == "ngram" and result.arms == {"k2": 2, "k4": 4}
    assert (result.metric, result.stat, result.promised_class) == ("tpot_s", "p95", "interactive")
    assert [(c.load, c.batch_size, c.batch_source, c.arm) for c in result.loads] == [
        ("1x", 2.0, ENGINE_SOURCE, "k4"),
        ("2x", 4.0, ENGINE_SOURCE, "k4"),
        ("3x", 6.0, ENGINE_SOURCE, "k4"),
        ("4x", 9.0, ENGINE_SOURCE, None),
        ("5x", 12.0, ENGINE_SOURCE, None),
    ]
    observed = result.bands[1]
    assert [c.load for c in observed.loads] == ["1x", "2x", "3x"]
    for choice in observed.loads:  # the chosen arm's paired interval is the evidence
        cell = next(c for c in choice.candidates if c.arm == "k4")
        assert cell.verdict == "better" and cell.noise_floor is not None
        assert choice.ratio_hi == cell.ratio_hi < 1.0
        assert choice.arm_batch_sizes == {
            "base": ACCEPTANCE_BATCH[choice.load],
            "k2": pytest.approx(0.8 * ACCEPTANCE_BATCH[choice.load]),
            "k4": pytest.approx(0.8 * ACCEPTANCE_BATCH[choice.load]),
        }
    assert "no evidence" in result.bands[0].note and "no evidence" in result.bands[-1].note
    assert result.reason is None and result.unplaced == ()


def test_the_doc_example_prints_what_the_docs_say(doc_example):
    interval = schedule_derive(doc_example, speculative_configs=CONFIGS)
    point = schedule_point_best(doc_example, speculative_configs=CONFIGS)
    assert interval.schedule == ((1, 4, 4), (5, 7, 2), (8, 1024, 0))
    assert point.schedule == ((1, 4, 4), (5, 7, 2), (8, 10, 4), (11, 1024, 0))
    four = next(c for c in interval.loads if c.load == "4x")
    assert four.k == 0 and {c.verdict for c in four.candidates} == {"not distinguishable"}
    text = DOCS.read_text()
    section = text[text.index("## Draft length by batch size") :]
    for result in (interval, point):
        assert json_list(result.schedule) in section
    for choice in interval.loads:
        for cell in choice.candidates:
            assert re.search(
                rf"\| {choice.load} \| {choice.batch_size:.1f} \| k{cell.k} \| {cell.ratio:.3f} \[{cell.ratio_lo:.3f}, "
                rf"{cell.ratio_hi:.3f}\] \| {cell.delta * 1000:.2f} \| {cell.noise_floor * 1000:.2f} \| {cell.verdict} \|",
                section,
            ), (choice.load, cell.arm)


def json_list(rows) -> str:
    return "[" + ", ".join(f"[{a}, {b}, {k}]" for a, b, k in rows) + "]"


# --- hand-built summaries ------------------------------------------------------------------------


def _row(
    arm: str, load: str, ratio: float, lo: float, hi: float, *, floor: float | None = 0.001, base=0.05
) -> dict:
    """A primary tpot_s p95 row: ratio and interval as given (candidate / baseline); its verdict
    as the comparison gives it (``paired.verdict``)."""
    delta, delta_lo, delta_hi = ((r - 1) * base for r in (ratio, lo, hi))
    word = verdict(measured=True, delta=delta, delta_lo=delta_lo, delta_hi=delta_hi, noise_floor=floor)
    return {
        "arm": arm, "load": load, "metric": "tpot_s", "stat": "p95", "base": base, "cand": ratio * base,
        "delta": delta, "delta_lo": delta_lo, "delta_hi": delta_hi, "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi,
        "measured": True, "method": "percentile", "role": "primary", "verdict": word, "noise_floor": floor,
        "n_requests": 50, "n_pairs": 100, "family_size": 4,
    }  # fmt: skip


def _summary(
    rows: list[dict], *, batch: dict[str, float | None], sweeps=None, arms=("base", "k2", "k4")
) -> Summary:
    runs = [
        {"arm": "base", "load": load, "repeat": rep, "run_id": i * 2 + rep,
         "spec_counters": {"kv": {"running_mean": b}} if b is not None else {"kv": {}}}
        for i, (load, b) in enumerate(batch.items())
        for rep in (0, 1)
    ]  # fmt: skip
    return summary_make(
        {
            "schema_version": 2,
            "baseline_arm": "base",
            "params": {"sweeps": {"ngram": {"k2": 2, "k4": 4}} if sweeps is None else sweeps},
            "endpoints": dict(ENDPOINTS),
            "primary": rows,
            "runs": runs,
            "arm_order": list(arms),
            "load_order": list(batch),
            "cost_basis": "busy_time",
        }
    )


def test_it_takes_the_best_upper_bound_where_the_point_rule_takes_the_best_point():
    rows = [_row("k2", "1x", 0.75, 0.70, 0.80), _row("k4", "1x", 0.70, 0.55, 0.90)]
    summary = _summary(rows, batch={"1x": 3.0})
    interval = schedule_derive(summary, speculative_configs=CONFIGS, max_batch_size=64)
    point = schedule_point_best(summary, speculative_configs=CONFIGS, max_batch_size=64)
    assert interval.schedule == ((1, 3, 2), (4, 64, 0))
    assert point.schedule == ((1, 3, 4), (4, 64, 0))
    assert interval.loads[0].reason == "k 2 (k2): ratio 0.750 [0.700, 0.800], beyond the noise floor"
    assert interval.speculative_config is not None
    assert interval.speculative_config["num_speculative_tokens"] == 2


def test_a_gain_inside_the_noise_floor_turns_nothing_on():
    # 2% of 0.05 s = 1 ms gain, interval clear of 0, floor 1.5 ms: not distinguishable
    rows = [_row("k2", "1x", 1.01, 0.99, 1.03), _row("k4", "1x", 0.98, 0.97, 0.99, floor=0.0015)]
    summary = _summary(rows, batch={"1x": 3.0})
    interval = schedule_derive(summary, speculative_configs=CONFIGS, max_batch_size=64)
    assert interval.schedule == ((1, 64, 0),)
    assert interval.speculative_config is None
    assert interval.reason is not None and interval.reason.startswith(
        "no load has a k better than the baseline beyond the A/A noise floor"
    )
    assert (
        interval.loads[0].reason
        == "k 0: none better beyond the noise floor (k 2 not distinguishable, k 4 not distinguishable)"
    )
    assert schedule_point_best(summary, speculative_configs=CONFIGS, max_batch_size=64).schedule == (
        (1, 3, 4),
        (4, 64, 0),
    )


def test_a_better_verdict_without_a_noise_floor_is_not_enough():
    rows = [_row("k2", "1x", 0.8, 0.7, 0.9, floor=None), _row("k4", "1x", 0.7, 0.6, 0.8, floor=None)]
    result = schedule_derive(
        _summary(rows, batch={"1x": 2.0}), speculative_configs=CONFIGS, max_batch_size=64
    )
    assert [c.verdict for c in result.loads[0].candidates] == ["better", "better"]
    assert result.schedule == ((1, 64, 0),) and result.speculative_config is None
    assert "k 4 better but no noise floor (one repeat)" in result.loads[0].reason


def test_no_load_better_turns_every_band_off_and_says_why():
    rows = [
        _row(arm, load, ratio, ratio - 0.05, ratio + 0.05)
        for load in ("1x", "2x")
        for arm, ratio in (("k2", 1.02), ("k4", 1.2))
    ]
    result = schedule_derive(
        _summary(rows, batch={"1x": 2.0, "2x": 5.0}), speculative_configs=CONFIGS, max_batch_size=64
    )
    assert _bands(result) == [
        (1, 1, 0, "below_observed"),
        (2, 5, 0, "observed"),
        (6, 64, 0, "beyond_observed"),
    ]
    assert result.schedule == ((1, 64, 0),)
    assert result.speculative_config is None and result.measured
    assert result.reason == (
        "no load has a k better than the baseline beyond the A/A noise floor: speculation off at every batch size "
        "(vLLM needs num_speculative_tokens > 0)"
    )


def test_a_single_k_without_a_sweep_still_gets_its_bands():
    rows = [_row("ngram", "1x", 0.7, 0.6, 0.8), _row("ngram", "4x", 1.1, 1.05, 1.15)]
    summary = _summary(rows, batch={"1x": 2.0, "4x": 10.0}, sweeps={}, arms=("base", "ngram"))
    configs = {"base": None, "ngram": {"method": "ngram", "num_speculative_tokens": 3}}
    result = schedule_derive(summary, speculative_configs=configs, max_batch_size=256)
    assert result.sweep is None and result.arms == {"ngram": 3}
    assert result.schedule == ((1, 5, 3), (6, 256, 0))
    assert result.speculative_config == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 5, 3], [6, 256, 0]],
    }


def test_missing_batch_sizes_are_not_measured_and_place_no_band():
    rows = [_row("k4", "1x", 0.7, 0.6, 0.8), _row("k4", "2x", 0.7, 0.6, 0.8)]
    result = schedule_derive(_summary(rows, batch={"1x": None, "2x": None}), speculative_configs=CONFIGS)
    assert not result.measured
    assert result.bands == () and result.schedule == () and result.speculative_config is None
    assert [c.load for c in result.unplaced] == ["1x", "2x"]
    assert all(c.batch_size is None and c.batch_source.startswith("not measured") for c in result.unplaced)
    assert result.reason is not None and result.reason.startswith("batch size not measured at any load")


def test_a_load_without_a_batch_size_is_left_out_not_guessed():
    rows = [_row("k4", load, 0.7, 0.6, 0.8) for load in ("1x", "2x")] + [_row("k4", "8x", 1.3, 1.2, 1.4)]
    result = schedule_derive(
        _summary(rows, batch={"1x": 2.0, "2x": 4.0, "8x": None}),
        speculative_configs=CONFIGS,
        max_batch_size=64,
    )
    assert [c.load for c in result.unplaced] == ["8x"]
    assert result.schedule == ((1, 4, 4), (5, 64, 0))  # 5.. is beyond the evidence, not "8x"'s k 0
    assert _bands(result)[-1] == (5, 64, 0, "beyond_observed")


def test_it_reads_the_replay_in_flight_where_the_engine_counted_nothing():
    rows = [_row("k4", "1x", 0.7, 0.6, 0.8), _row("k4", "2x", 1.3, 1.2, 1.4)]
    summary = _summary(rows, batch={"1x": None, "2x": 6.0})
    fit = [
        {"load": "1x", "repeat": 0, "inflight_mean": 2.5},
        {"load": "1x", "repeat": 1, "inflight_mean": 3.5},
        {"load": "2x", "repeat": 0, "inflight_mean": 40.0},  # the engine's figure wins there
        {"load": "3x", "repeat": 0, "inflight_mean": None},
    ]
    replay = batch_sizes_replay(fit)
    assert replay["1x"].batch_size == 3.0 and replay["1x"].n_runs == 2 and "3x" not in replay
    result = schedule_derive(summary, speculative_configs=CONFIGS, replay=replay, max_batch_size=64)
    assert [(c.load, c.batch_size, c.batch_source) for c in result.loads] == [
        ("1x", 3.0, REPLAY_SOURCE),
        ("2x", 6.0, ENGINE_SOURCE),
    ]
    assert result.schedule == ((1, 4, 4), (5, 64, 0))


def _placed(*points: tuple[str, float, int]) -> list[LoadChoice]:
    return [
        LoadChoice(load, b, ENGINE_SOURCE, k, f"k{k}" if k else None, None, None, None, "r", ())
        for load, b, k in points
    ]


def test_the_boundary_is_the_midpoint_and_a_tie_takes_the_smaller_k():
    bands = bands_build(_placed(("1x", 4.0, 4), ("2x", 8.0, 0)), max_batch_size=32)
    assert [(b.start, b.end, b.k, b.evidence) for b in bands] == [
        (1, 3, 4, "below_observed"),
        (4, 5, 4, "observed"),
        (6, 8, 0, "observed"),  # 6 is the midpoint: the smaller k
        (9, 32, 0, "beyond_observed"),
    ]
    shifted = bands_build(_placed(("1x", 4.0, 4), ("2x", 8.6, 0)), max_batch_size=32)
    assert [(b.start, b.end, b.k) for b in shifted][1:3] == [(4, 6, 4), (7, 8, 0)]  # midpoint 6.3


def test_below_the_smallest_batch_size_can_be_turned_off():
    bands = bands_build(_placed(("1x", 4.0, 4), ("2x", 8.0, 2)), max_batch_size=8, below_smallest="off")
    assert [(b.start, b.end, b.k, b.evidence) for b in bands] == [
        (1, 3, 0, "below_observed"),
        (4, 5, 4, "observed"),
        (6, 8, 2, "observed"),
    ]
    assert "speculation off" in bands[0].note


def test_a_mean_below_one_sits_at_one_and_same_choices_merge():
    bands = bands_build(_placed(("1x", 0.4, 3), ("2x", 2.2, 3), ("3x", 5.0, 1)), max_batch_size=16)
    assert [(b.start, b.end, b.k, b.evidence) for b in bands] == [
        (1, 3, 3, "observed"),
        (4, 5, 1, "observed"),
        (6, 16, 0, "beyond_observed"),
    ]
    assert [c.load for c in bands[0].loads] == ["1x", "2x"]


def test_it_refuses_to_guess_which_sweep():
    rows = [_row("k4", "1x", 0.7, 0.6, 0.8)]
    two = {"ngram": {"k2": 2, "k4": 4}, "draft_model(d)": {"d2": 2, "d4": 4}}
    with pytest.raises(ScheduleError, match="several draft-length sweeps"):
        schedule_derive(_summary(rows, batch={"1x": 2.0}, sweeps=two), speculative_configs=CONFIGS)
    with pytest.raises(ScheduleError, match="no sweep 'eagle'"):
        schedule_derive(_summary(rows, batch={"1x": 2.0}), speculative_configs=CONFIGS, sweep="eagle")
    with pytest.raises(ScheduleError, match="differ in more than num_speculative_tokens"):
        odd = dict(CONFIGS, k2={"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2})
        schedule_derive(_summary(rows, batch={"1x": 2.0}), speculative_configs=odd)
