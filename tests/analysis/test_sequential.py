"""The run-until-decided stopping rule (console.experiments.sequential): hand-computed looks, the
plan's checks, the budget, and by simulation that Bonferroni over looks holds the false-decision
rate and the coverage of the interval it stops on where looking at unadjusted 95% intervals does
not (the pool-based calibration: tests/decisions/test_calibration_sequential.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from console.experiments.sequential import Look, Plan, Spent, Stop, experiment_stop, look_outcome, stop_decide


def _look(r: int, lo: float, hi: float, floor: float | None = 0.01) -> Look:
    return Look(repeats=r, delta=(lo + hi) / 2, lo=lo, hi=hi, noise_floor=floor)


def test_it_splits_alpha_over_the_looks_and_endpoints():
    assert Plan(max_repeats=5).looks == 4
    assert Plan(max_repeats=5).level == pytest.approx(1 - 0.05 / 4)
    assert Plan(max_repeats=5, first_look=1, endpoints=2).level == pytest.approx(1 - 0.05 / 10)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"max_repeats": 1}, "first look (2) must be between 1 and max repeats (1)"),
        ({"max_repeats": 5, "margin": 0.0}, "equivalence margin (0.0) must be a positive number"),
        ({"max_repeats": 5, "alpha": 0.7}, "alpha (0.7) must be between 0 and 0.5"),
        ({"max_repeats": 5, "max_runs": 0}, "run budget (0) must be at least 1"),
    ],
)
def test_it_rejects_a_plan_with_words_a_form_can_show(kwargs, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Plan(**kwargs)


def test_it_decides_on_the_interval_beyond_the_floor_or_inside_the_margin():
    plan = Plan(max_repeats=5, margin=0.05)
    assert look_outcome(_look(2, -0.09, -0.02), plan=plan) == "better"
    assert look_outcome(_look(2, -0.09, -0.005), plan=plan) == "continue"  # clears 0, not the floor
    assert look_outcome(_look(2, 0.02, 0.09), plan=plan) == "worse"
    assert look_outcome(_look(2, -0.04, 0.008), plan=plan) == "equivalent"
    assert look_outcome(_look(2, -0.04, 0.06), plan=plan) == "continue"
    assert look_outcome(_look(2, -0.09, -0.02, floor=None), plan=plan) == "continue"  # no floor, no direction
    assert look_outcome(_look(2, math.nan, math.nan), plan=plan) == "continue"  # not measured
    higher = Plan(max_repeats=5, lower_is_better=False)
    assert look_outcome(_look(2, 0.02, 0.09), plan=higher) == "better"


def test_it_keeps_the_first_decision_and_says_why():
    plan = Plan(max_repeats=5, margin=0.05)
    stop = stop_decide([_look(2, -0.09, 0.01), _look(3, -0.09, -0.02), _look(4, -0.09, 0.01)], plan=plan)
    assert stop == Stop("better", 3, stop.reason)
    assert stop.reason.startswith("better after 3 repeats: the 98.75% interval [-0.09, -0.02] lies below")


def test_it_continues_until_max_repeats_or_the_budget():
    plan = Plan(max_repeats=4, max_runs=10, max_accelerator_hours=3.0)
    undecided = [_look(2, -0.09, 0.01), _look(3, -0.09, 0.01), _look(4, -0.09, 0.01)]
    assert stop_decide(undecided[:1], plan=plan, spent=Spent(runs=4, runs_per_repeat=2)).outcome == "continue"
    over_runs = stop_decide(undecided[:2], plan=plan, spent=Spent(runs=10, runs_per_repeat=2))
    assert over_runs.outcome == "undecided" and "budget of 10 runs" in over_runs.reason
    over_hours = stop_decide(
        undecided[:2], plan=plan, spent=Spent(accelerator_hours=2.5, accelerator_hours_per_repeat=1)
    )
    assert over_hours.outcome == "undecided" and "3 accelerator-hours" in over_hours.reason
    at_max = stop_decide(undecided, plan=plan)
    assert at_max.outcome == "undecided" and at_max.reason.startswith(
        "undecided after 4 repeats, the most planned"
    )
    with pytest.raises(ValueError, match="looks must be at repeats 2, 3"):
        stop_decide([_look(3, -1, 1)], plan=plan)


def test_it_stops_the_experiment_only_when_every_endpoint_stopped():
    better, cont = Stop("better", 3, "a"), Stop("continue", 3, "b")
    assert experiment_stop([better, cont]).outcome == "continue"
    assert experiment_stop([better, Stop("better", 2, "c")]).outcome == "better"
    assert experiment_stop([better, Stop("equivalent", 3, "c")]).outcome == "mixed"
    assert experiment_stop([better, Stop("undecided", 5, "c")]) == Stop("undecided", 5, "a; c")


def _group_sequential(
    level: float, *, sims: int, truth: float, margin: float | None, seed: int, first_look: int = 2
) -> tuple[float, float]:
    """(false-decision rate, coverage of the interval it stopped on) of the rule looking at
    repeats ``first_look``..5 of a mean with independent N(truth, 1) repeat increments and known
    sd: the looks' least correlated case, the hardest for repeated looks. Floor 0 (the rule's guard is
    the interval alone)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(truth, 1.0, size=(sims, 5))
    plan = Plan(max_repeats=5, first_look=first_look, margin=margin)
    z = norm.ppf(0.5 + level / 2)
    false = covered = 0
    for row in x:
        means = np.cumsum(row) / np.arange(1, 6)
        looks = [
            Look(r, means[r - 1], means[r - 1] - z / math.sqrt(r), means[r - 1] + z / math.sqrt(r), 0.0)
            for r in range(first_look, 6)
        ]
        for i in range(len(looks)):
            stop = stop_decide(looks[: i + 1], plan=plan)
            if stop.stopped:
                break
        lk = looks[i]
        covered += lk.lo <= truth <= lk.hi
        false += (
            (stop.outcome == "better" and truth >= 0)
            or (stop.outcome == "worse" and truth <= 0)
            or (stop.outcome == "equivalent" and margin is not None and abs(truth) >= margin)
        )
    return false / sims, covered / sims


SIMS = 4000  # Monte Carlo error of a rate near 0.05: 0.0034
MC = math.sqrt(0.05 * 0.95 / SIMS)


@pytest.mark.parametrize(("truth", "margin"), [(0.0, None), (0.0, 2.0), (1.5, 1.5), (2.0, 2.0), (-3.0, 1.0)])
def test_it_holds_alpha_and_coverage_over_repeated_looks(truth, margin):
    # (1.5, 1.5): the truth on the margin, where "equivalent" is false and most often said.
    false, coverage = _group_sequential(
        Plan(max_repeats=5).level, sims=SIMS, truth=truth, margin=margin, seed=7
    )
    assert false <= 0.05 + 2 * MC
    assert coverage >= 0.95 - 2 * MC


def test_it_would_fail_for_unadjusted_looks():
    # Looking at 95% intervals after every repeat: a fixed design's false decisions pile up over
    # the looks (0.11 at 4 looks for a zero truth), and the interval it stops on covers 0.89.
    naive_false, naive_coverage = _group_sequential(0.95, sims=SIMS, truth=0.0, margin=None, seed=7)
    assert naive_false > 0.05 + 4 * MC, naive_false
    assert naive_coverage < 0.95 - 4 * MC, naive_coverage
    fixed_false, _ = _group_sequential(0.95, sims=SIMS, truth=0.0, margin=None, seed=7, first_look=5)
    assert fixed_false <= 0.05 + 2 * MC  # one look at 95% holds its rate: the looks cost it
