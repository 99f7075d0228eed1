import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.analysis.stats import (
    _count_blocks,
    aa_noise_floor,
    bootstrap_distributions,
    interval,
    knee_find,
    paired_compare,
    point_stat,
    run_spread,
    verdict,
)


def test_it_matches_explicit_resampling_exactly():
    rng = np.random.default_rng(5)
    values = rng.normal(size=60)
    values[[3, 17]] = np.nan
    boots = bootstrap_distributions(
        {"x": values}, stats={"x": ("mean", "p0", "p50", "p90", "p100")}, n_boot=150, seed=11
    )
    counts = np.vstack(list(_count_blocks([60], n_boot=150, seed=11)))
    for r in range(150):
        resample = np.repeat(values, counts[r].astype(int))
        resample = resample[np.isfinite(resample)]
        assert boots[("x", "mean")][r] == pytest.approx(resample.mean())
        for q in (0, 50, 90, 100):
            assert boots[("x", f"p{q}")][r] == pytest.approx(np.percentile(resample, q))


def test_it_matches_explicit_resampling_with_ties_and_strata():
    # Larger n: the order-statistic window is narrower than the data, and ties span its edges.
    rng = np.random.default_rng(8)
    values = rng.integers(0, 5, size=3000).astype(float)
    strata = np.repeat([0, 1, 2], 1000)
    boots = bootstrap_distributions(
        {"x": values}, stats={"x": ("p50", "p99")}, strata=strata, n_boot=40, seed=2
    )
    counts = np.vstack(list(_count_blocks([1000, 1000, 1000], n_boot=40, seed=2)))
    for r in range(40):
        resample = np.repeat(values, counts[r].astype(int))  # strata are already contiguous here
        assert boots[("x", "p50")][r] == pytest.approx(np.percentile(resample, 50))
        assert boots[("x", "p99")][r] == pytest.approx(np.percentile(resample, 99))


def test_it_stays_exact_when_a_resample_falls_outside_the_window(monkeypatch):
    monkeypatch.setattr("console.analysis.stats.WINDOW_SDS", 0.0)  # a window of a few ranks only
    values = np.random.default_rng(9).normal(size=400)
    boots = bootstrap_distributions({"x": values}, stats={"x": ("p50", "p90")}, n_boot=60, seed=4)
    counts = np.vstack(list(_count_blocks([400], n_boot=60, seed=4)))
    for r in range(60):
        resample = np.repeat(values, counts[r].astype(int))
        assert boots[("x", "p50")][r] == pytest.approx(np.percentile(resample, 50))
        assert boots[("x", "p90")][r] == pytest.approx(np.percentile(resample, 90))


def test_it_resamples_within_each_stratum():
    counts = np.vstack(list(_count_blocks([3, 5], n_boot=40, seed=1)))
    # every resample draws 3 requests from stratum 0 and 5 from stratum 1
    assert (counts[:, :3].sum(axis=1) == 3).all()
    assert (counts[:, 3:].sum(axis=1) == 5).all()
    assert counts[:, :3].std() > 0  # and they are resampled, not copied


def test_it_is_reproducible_for_a_seed():
    x = np.arange(20.0)
    a = bootstrap_distributions({"x": x}, stats={"x": ("p50",)}, n_boot=50, seed=3)[("x", "p50")]
    b = bootstrap_distributions({"x": x}, stats={"x": ("p50",)}, n_boot=50, seed=3)[("x", "p50")]
    c = bootstrap_distributions({"x": x}, stats={"x": ("p50",)}, n_boot=50, seed=4)[("x", "p50")]
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_it_gives_identical_arms_a_degenerate_interval_at_one():
    x = np.random.default_rng(0).lognormal(size=500)
    res = paired_compare({"t": x}, {"t": x.copy()}, stats={"t": ("mean", "p95")}, n_boot=300, seed=0)
    for row in res.itertuples():
        assert (row.delta, row.delta_lo, row.delta_hi) == (0.0, 0.0, 0.0)
        assert (row.ratio_lo, row.ratio_hi) == (1.0, 1.0)


def test_it_pairs_requests_so_a_constant_shift_is_exact():
    # Wide spread between requests but every candidate request exactly 0.1 s faster: paired
    # resampling sees the shift in every resample, an unpaired one would drown it in the spread.
    x = np.random.default_rng(1).uniform(1, 100, size=400)
    res = paired_compare({"t": x}, {"t": x - 0.1}, stats={"t": ("mean",)}, n_boot=300, seed=0).iloc[0]
    assert res["delta"] == pytest.approx(-0.1)
    assert res["delta_lo"] == pytest.approx(-0.1) and res["delta_hi"] == pytest.approx(-0.1)


def test_it_drops_pairs_missing_on_either_side():
    base = np.array([1.0, 2.0, np.nan, 4.0])
    cand = np.array([1.0, np.nan, 3.0, 2.0])
    res = paired_compare({"t": base}, {"t": cand}, stats={"t": ("mean",)}, n_boot=50, seed=0).iloc[0]
    # only requests 0 and 3 are defined on both sides: base mean 2.5, cand mean 1.5
    assert (res["n_pairs"], res["n_excluded"]) == (2, 2)
    assert res["base"] == pytest.approx(2.5) and res["cand"] == pytest.approx(1.5)
    assert res["ratio"] == pytest.approx(0.6)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0, 1000, allow_nan=False), min_size=1, max_size=40),
    st.sampled_from(["mean", "p50", "p95"]),
    st.integers(0, 2**16),
)
def test_it_puts_the_point_estimate_inside_its_interval(values, stat, seed):
    x = np.array(values)
    boot = bootstrap_distributions({"x": x}, stats={"x": (stat,)}, n_boot=400, seed=seed)[("x", stat)]
    lo, hi = interval(boot, ci=0.95)
    est = point_stat(x, stat)
    assert lo - 1e-9 <= est <= hi + 1e-9


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.01, 100, allow_nan=False), min_size=2, max_size=40), st.integers(0, 2**16))
def test_it_keeps_the_ratio_of_identical_arms_at_one(values, seed):
    x = np.array(values)
    res = paired_compare({"t": x}, {"t": x}, stats={"t": ("mean", "p50")}, n_boot=200, seed=seed)
    assert (res["ratio_lo"] <= 1.0).all() and (res["ratio_hi"] >= 1.0).all()


def test_it_calls_verdicts_against_the_interval_and_the_noise_floor():
    assert verdict(delta=-0.2, delta_lo=-0.3, delta_hi=-0.1, noise_floor=None) == "better"
    assert verdict(delta=0.2, delta_lo=0.1, delta_hi=0.3, noise_floor=None) == "worse"
    assert verdict(delta=-0.2, delta_lo=-0.3, delta_hi=0.1, noise_floor=None) == "not distinguishable"
    # significant, but no bigger than what two identical baseline repeats show
    assert verdict(delta=-0.2, delta_lo=-0.3, delta_hi=-0.1, noise_floor=0.25) == "not distinguishable"
    assert (
        verdict(delta=0.05, delta_lo=0.02, delta_hi=0.08, noise_floor=None, lower_is_better=False) == "better"
    )
    assert verdict(delta=math.nan, delta_lo=math.nan, delta_hi=math.nan, noise_floor=None) == "unknown"


def _repeats(values_by_repeat):
    rows = []
    for rep, values in values_by_repeat.items():
        rows += [{"request_id": f"r{i}", "repeat": rep, "t": v} for i, v in enumerate(values)]
    return pd.DataFrame(rows)


def test_it_finds_no_noise_between_identical_repeats():
    x = np.random.default_rng(2).lognormal(size=200)
    aa = aa_noise_floor(_repeats({0: x, 1: x}), stats={"t": ("mean", "p95")}, n_boot=200).set_index("stat")
    assert aa.loc["mean", "noise_floor"] == 0.0 and aa.loc["p95", "noise_floor"] == 0.0
    assert aa["aa_pass"].all()
    assert (aa["n_repeat_pairs"] == 1).all()


def test_it_sizes_the_noise_floor_from_repeat_differences():
    rng = np.random.default_rng(3)
    x = rng.lognormal(size=300)
    reps = {0: x, 1: x * rng.lognormal(0, 0.05, 300), 2: x * rng.lognormal(0, 0.05, 300)}
    aa = aa_noise_floor(_repeats(reps), stats={"t": ("mean",)}, n_boot=300).iloc[0]
    assert aa["n_repeat_pairs"] == 3  # (0, 1), (0, 2), (1, 2)
    assert aa["noise_floor"] > aa["max_abs_delta"] > 0


def test_it_reports_no_noise_floor_with_one_repeat():
    aa = aa_noise_floor(_repeats({0: [1.0, 2.0]}), stats={"t": ("mean",)}, n_boot=10).iloc[0]
    assert math.isnan(aa["noise_floor"]) and aa["aa_pass"] is None


def test_it_finds_the_knee_where_gains_fall_below_the_interval_width():
    # 0 -> 2 gains 5 ms, 2 -> 4 gains 3 ms, 4 -> 8 gains 0.1 ms with 1 ms of interval: knee at 4
    assert knee_find([0, 2, 4, 8], [5.0, 3.0, 0.1], [1.0, 1.0, 1.0]) == {"knee_k": 4, "reached": True}
    assert knee_find([0, 2, 4], [5.0, 3.0], [1.0, 1.0]) == {"knee_k": 4, "reached": False}
    assert knee_find([0, 2], [-1.0], [0.5]) == {"knee_k": 0, "reached": True}


def test_it_reports_run_to_run_spread():
    per_run = pd.DataFrame({"arm": ["a"] * 3, "load": ["1x"] * 3, "tpot": [1.0, 2.0, 3.0]})
    row = run_spread(per_run, columns=["tpot"]).iloc[0]
    assert (row["n_runs"], row["mean"], row["std"], row["min"], row["max"]) == (3, 2.0, 1.0, 1.0, 3.0)
