"""Capacity at the SLO, the pure part: the SLO evaluation of one run, the log-space bisection,
the envelope interval across repeats and the ratio, on synthetic step outcomes whose true
threshold is known."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from console.analysis.comparison.capacity_stage import (
    arm_capacity,
    capacity_ratio,
    capacity_stage,
    nearest_rank,
    search_result,
    slo_evaluate,
)
from console.experiments.capacity_bisection import next_multiplier


def _search(threshold: float, *, lo=0.25, hi=16.0, steps=5, passes=None) -> list[tuple[float, bool]]:
    """Run a whole search against a known truth: a step passes iff its multiplier <= threshold
    (or ``passes(m)``)."""
    passes = passes or (lambda m: m <= threshold)
    done: list[tuple[float, bool]] = []
    while (m := next_multiplier(done, lo=lo, hi=hi, max_steps=steps)) is not None:
        done.append((m, passes(m)))
    return done


def test_it_starts_at_the_geometric_middle_of_the_bracket():
    assert next_multiplier([], lo=0.25, hi=16, max_steps=5) == pytest.approx(2.0)
    assert next_multiplier([(2.0, True)], lo=0.25, hi=16, max_steps=5) == pytest.approx(math.sqrt(32))
    assert next_multiplier([(2.0, False)], lo=0.25, hi=16, max_steps=5) == pytest.approx(math.sqrt(0.5))


@pytest.mark.parametrize("threshold", np.geomspace(0.3, 13.5, 37).tolist())
def test_its_bracket_holds_the_true_threshold_and_narrows_by_halves_in_log_space(threshold):
    steps = _search(threshold)
    assert len(steps) == 5
    result = search_result(steps)
    low, high = result["bracket"]
    assert result["censored"] is None
    assert low <= threshold < high
    # five halvings of log(64): the bracket is 64 ** (1 / 32) wide at most
    assert high / low <= 64 ** (1 / 32) + 1e-9
    assert result["rate_multiplier"] == low


def test_it_says_when_the_capacity_is_outside_the_bracket():
    below = search_result(_search(0.1))
    assert below["rate_multiplier"] is None and below["censored"] == "below"
    assert below["bracket"][0] is None and below["bracket"][1] < 0.3
    above = search_result(_search(100))
    assert above["censored"] == "above" and above["bracket"][1] is None and above["rate_multiplier"] > 14


def test_it_stops_early_once_the_bracket_is_narrower_than_the_resolution():
    steps = _search(1.5, lo=1.0, hi=1.2, steps=8)
    # 1.2 / 1.0 = 1.2 -> sqrt: 1.095 -> 1.044 < 1.05: two steps, not eight
    assert len(steps) == 2
    assert next_multiplier([(1.0, True), (1.04, False)], lo=0.5, hi=2, max_steps=8) is None


def test_it_ignores_and_flags_a_pass_above_a_failure():
    result = search_result([(2.0, False), (0.7, True), (1.2, False), (4.0, True)])
    assert result["bracket"] == [0.7, 1.2] and result["non_monotone"] is True


def test_the_envelope_interval_covers_every_repeats_threshold_in_simulation():
    """Known truth: each repeat has its own threshold (run-to-run spread, lognormal around 3x);
    the envelope of the repeats' brackets must hold each of them, every time."""
    rng = np.random.default_rng(11)
    widths = []
    for _ in range(300):
        truths = 3.0 * np.exp(rng.normal(0, 0.2, size=3))
        results = [search_result(_search(t)) for t in truths]
        pooled = arm_capacity(results)
        low, high = pooled["interval"]
        assert all(low <= t < high for t in truths)
        assert low <= pooled["rate_multiplier"] <= high
        widths.append(high / low)
    # and it is informative: typically well under one doubling
    assert np.median(widths) < 2.0


def test_with_one_repeat_the_interval_is_the_search_bracket():
    result = search_result(_search(3.0))
    pooled = arm_capacity([result])
    assert pooled["interval"] == result["bracket"] and pooled["n_repeats"] == 1


def test_the_ratio_interval_is_above_one_only_when_the_candidate_passed_where_the_baseline_failed():
    base = arm_capacity([search_result(_search(1.0)), search_result(_search(1.1))])
    fast = arm_capacity([search_result(_search(3.0)), search_result(_search(3.3))])
    same = arm_capacity([search_result(_search(1.05)), search_result(_search(0.95))])
    faster = capacity_ratio(fast, base)
    assert faster["ratio"] == pytest.approx(fast["rate_multiplier"] / base["rate_multiplier"])
    assert faster["ratio_interval"][0] > 1 and faster["ratio_interval"][1] > faster["ratio"]
    aa = capacity_ratio(same, base)
    assert aa["ratio_interval"][0] <= 1 <= aa["ratio_interval"][1]
    # an open end leaves the interval open, never invented
    open_end = capacity_ratio(arm_capacity([search_result(_search(100))]), base)
    assert open_end["ratio_interval"][1] is None and open_end["ratio_interval"][0] > 1


def _rows(e2e: list[float], *, tpot: float = 0.05, deadline: float = 1.0, failed: int = 0, cls="interactive"):
    n = len(e2e) + failed
    return pd.DataFrame(
        {
            "traffic_class": [cls] * n,
            "completed": [True] * len(e2e) + [False] * failed,
            "e2e_s": e2e + [math.nan] * failed,
            "tpot_s": [tpot] * len(e2e) + [math.nan] * failed,
            "met_deadline": [x <= deadline for x in e2e] + [False] * failed,
        }
    )


def test_it_evaluates_an_slo_by_nearest_rank_with_failures_infinitely_slow():
    rows = _rows([0.1 * i for i in range(1, 20)], failed=1)  # 19 completed + 1 failed
    ev = slo_evaluate(rows, {"traffic_class": "interactive", "p95_e2e_s": 5.0})
    # nearest rank of 20 at 0.95 is the 19th: the slowest completed request, not the failure
    assert ev["p95_e2e_s"] == pytest.approx(1.9) and ev["passed"]
    ev = slo_evaluate(rows, {"traffic_class": "interactive", "attainment": 0.99})
    assert ev["attainment"] == pytest.approx(10 / 20) and not ev["passed"]
    assert "attainment 50% < 99%" in ev["reasons"][0]
    two_failed = _rows([0.1] * 18, failed=2)
    ev = slo_evaluate(two_failed, {"traffic_class": "all", "p95_e2e_s": 5.0})
    assert ev["p95_e2e_s"] is None and not ev["passed"]  # the 19th is a failure: +inf
    assert slo_evaluate(rows, {"traffic_class": "batch", "p95_e2e_s": 5.0})["passed"] is False
    assert nearest_rank(np.array([3.0, 1.0, 2.0]), 0.5) == 2.0


def test_it_evaluates_the_tpot_bound():
    assert slo_evaluate(_rows([0.5, 0.6], tpot=0.05), {"p95_tpot_s": 0.1})["passed"]
    ev = slo_evaluate(_rows([0.5, 0.6], tpot=0.2), {"p95_tpot_s": 0.1})
    assert not ev["passed"] and ev["p95_tpot_s"] == pytest.approx(0.2)


def _step_frame(arm: str, truth: float, *, repeat: int, run_ids, n: int = 10, search=None):
    """Rows of a simulated search of ``arm``: at a multiplier above ``truth`` every request
    misses its deadline; the run's window shrinks with the rate."""
    search = search or {"lo": 0.25, "hi": 16.0, "steps": 4}
    steps = _search(truth, lo=search["lo"], hi=search["hi"], steps=search["steps"])
    rows, runs = [], []
    for step, (mult, ok) in enumerate(steps, start=1):
        run_id = next(run_ids)
        for i in range(n):
            e2e = 0.5 if ok else 3.0
            rows.append(
                {
                    "run_id": run_id,
                    "arm": arm,
                    "repeat": repeat,
                    "rate_multiplier": mult,
                    "capacity_step": step,
                    "traffic_class": "interactive",
                    "completed": True,
                    "met_deadline": e2e <= 1.0,
                    "e2e_s": e2e,
                    "tpot_s": 0.05,
                    "scheduled_s": i * 1.0 / mult,
                    "success": float(e2e <= 1.0),
                }
            )
        runs.append({"run_id": run_id, "wall_s": (n - 1) / mult + 0.5, "accelerator_count": 1})
    return rows, runs


def test_capacity_stage_reports_capacity_ratio_curve_and_cost_at_capacity():
    ids = iter(range(1, 1000))
    search = {"slo": {"traffic_class": "interactive", "attainment": 0.99}, "lo": 0.25, "hi": 16.0, "steps": 4}
    frames, runs = [], []
    for arm, truth in (("baseline", 1.0), ("fast", 4.5)):
        for repeat in (0, 1):
            r, w = _step_frame(arm, truth * (1 + 0.05 * repeat), repeat=repeat, run_ids=ids, search=search)
            frames += r
            runs += w
    out = capacity_stage(
        pd.DataFrame(frames), pd.DataFrame(runs), search=search, base_arm="baseline", cost_per_hour_usd=3.6,
        arm_order=["baseline", "fast"],
    )
    base, fast = out["arms"]
    assert [base["arm"], fast["arm"]] == ["baseline", "fast"] and base["is_baseline"]
    assert base["interval"][0] <= 1.0 < base["interval"][1]
    assert fast["interval"][0] <= 4.5 < fast["interval"][1]
    assert fast["ratio"] > 2 and fast["ratio_interval"][0] > 1
    assert base["ratio"] is None
    assert len(fast["steps"]) == 8 and all(set(p) >= {"rate_multiplier", "attainment", "p95_tpot_s", "passed"} for p in fast["steps"])
    # cost per success at capacity = price / (successes per hour in the window at capacity)
    cap_runs = [p for p in base["steps"] if p["rate_multiplier"] in [s["rate_multiplier"] for s in base["searches"]]]
    assert cap_runs
    mults = [s["rate_multiplier"] for s in base["searches"]]
    window = sum(9 / m + 0.5 for m in mults)
    assert base["successes_per_hour"] == pytest.approx(20 / window * 3600)
    assert base["cost_per_success_usd"] == pytest.approx(3.6 / base["successes_per_hour"])
    assert fast["cost_per_success_usd"] < base["cost_per_success_usd"]
    assert out["interval_method"].startswith("envelope")
