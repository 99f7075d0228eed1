"""The rollback triggers' sequential test (console.rollouts.sequential): hand-checked looks, bad
arguments, the running p-value, and by simulation that it holds alpha over 200 looks at the
threshold where a t-test repeated at every look does not (the full calibration:
``python -m console.rollouts.sequential_calibration``, docs/statistics.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from console.rollouts.sequential import (
    breach_excess,
    first_breach,
    log_evidence,
    looks_needed,
    sequential_evaluate,
)
from console.rollouts.sequential_calibration import naive_breach, plugin_breach

ALPHA = 0.05
SIMS, LOOKS = 2000, 200


def _mc_bound(rate: float, sims: int) -> float:
    """alpha plus 3 Monte Carlo standard errors of a rate near alpha."""
    return rate + 3 * math.sqrt(rate * (1 - rate) / sims)


def test_it_says_not_enough_before_the_looks_needed():
    result = sequential_evaluate([0.9, 1.0, 1.1], op=">", threshold=0.1)
    assert result.state == "not_enough"
    assert result.needed == 4  # the t-mixture cannot reach 1/0.05 = 20 before look 4 (tau = 1)
    assert result.p_value == 1.0
    assert result.n == 3
    assert result.mean == pytest.approx(1.0)
    assert result.sd == pytest.approx(0.1)


def test_it_needs_the_larger_of_min_samples_and_what_the_method_needs():
    assert looks_needed(alpha=0.05, min_samples=1) == 4  # 2 * 5**1.5 = 22.4 >= 20, 2 * 4 = 8 < 20
    assert looks_needed(alpha=0.01, min_samples=1) == 6  # 2 * 6**2 = 72 < 100 <= 2 * 7**2.5
    assert looks_needed(alpha=0.05, min_samples=10) == 10
    assert sequential_evaluate([1.0] * 9, op=">", threshold=0.0, min_samples=10).state == "not_enough"


def test_it_declares_a_breach_on_a_clear_large_shift():
    # p95 TPOT difference, seconds: about 40 ms worse against a 5 ms threshold, noise 2 ms
    looks = [0.041, 0.038, 0.043, 0.040, 0.039, 0.042, 0.037, 0.041]
    result = sequential_evaluate(looks, op=">", threshold=0.005)
    assert result.state == "breach"
    # with the SD unknown, 8 looks can give at most BF = 2 * 9**3.5 (all equal): p >= 2.3e-4
    assert 1 / (2 * 9**3.5) <= result.p_value < 1e-3
    assert sequential_evaluate(looks, op="<", threshold=0.005).state == "ok"  # the other side


def test_it_tests_the_lower_side_for_op_less_than():
    # acceptance rate (a fraction) falling well below 0.6
    falling = [0.41, 0.39, 0.43, 0.40, 0.42, 0.38]
    assert sequential_evaluate(falling, op="<", threshold=0.6).state == "breach"
    assert sequential_evaluate(falling, op="<=", threshold=0.6).state == "breach"
    assert sequential_evaluate(falling, op=">", threshold=0.6).state == "ok"
    healthy = [0.71, 0.69, 0.73, 0.70, 0.72, 0.68]
    assert sequential_evaluate(healthy, op="<", threshold=0.6).state == "ok"
    assert sequential_evaluate(healthy, op="<", threshold=0.6).p_value == 1.0


def test_it_matches_the_mixture_integral_by_quadrature():
    # the closed form against the Bayes factor integrated numerically: right-Haar prior on sigma,
    # half-normal(1) prior on delta = mean / sigma
    y = np.array([0.8, -0.3, 1.1, 0.4, 0.2])

    def likelihood(delta: float, sigma: float) -> float:
        return float(np.prod(stats.norm.pdf(y, delta * sigma, sigma))) / sigma

    mixture = integrate.dblquad(
        lambda sigma, delta: likelihood(delta, sigma) * 2 * stats.norm.pdf(delta), 0, 6, 0.05, 10, epsrel=1e-6
    )[0]
    null = integrate.quad(lambda sigma: likelihood(0.0, sigma), 0.05, 10)[0]
    assert log_evidence(y[None, :])[0, -1] == pytest.approx(math.log(mixture / null), abs=1e-4)


def test_it_ignores_non_finite_observations():
    looks = [0.041, math.nan, 0.038, math.inf, 0.043, -math.inf, 0.040, 0.039]
    result = sequential_evaluate(looks, op=">", threshold=0.005)
    finite = [v for v in looks if math.isfinite(v)]
    assert result == sequential_evaluate(finite, op=">", threshold=0.005)
    assert result.n == 5
    empty = sequential_evaluate([math.nan, math.nan], op=">", threshold=0.0)
    assert (empty.n, empty.mean, empty.sd, empty.state) == (0, None, None, "not_enough")


def test_it_reads_values_at_the_threshold_as_no_evidence():
    result = sequential_evaluate([0.6] * 20, op="<", threshold=0.6)
    assert (result.state, result.p_value) == ("ok", 1.0)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"op": "!="}, "op ('!=') must be one of >, >=, <, <="),
        ({"threshold": math.nan}, "threshold (nan) must be a finite number"),
        ({"threshold": math.inf}, "threshold (inf) must be a finite number"),
        ({"alpha": 0.0}, r"alpha (0.0) must be in [1e-12, 0.5]"),
        ({"alpha": 0.6}, r"alpha (0.6) must be in [1e-12, 0.5]"),
        ({"min_samples": 0}, "min_samples (0) must be an integer >= 1"),
    ],
)
def test_it_rejects_bad_arguments_with_words_a_form_can_show(kwargs, words):
    arguments = {"op": ">", "threshold": 0.0, "alpha": 0.05, "min_samples": 3, **kwargs}
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        sequential_evaluate([1.0, 2.0, 3.0, 4.0], **arguments)


def test_it_breaches_at_the_same_look_one_call_at_a_time_and_vectorised():
    rng = np.random.default_rng(7)
    paths = 0.004 + 0.003 * rng.standard_normal((6, 40))  # excess 0.33 SD over 0.003 s
    firsts = first_breach(paths, op=">", threshold=0.003)
    for path, first in zip(paths, firsts, strict=True):
        states = [sequential_evaluate(path[:k], op=">", threshold=0.003).state for k in range(1, 41)]
        expected = states.index("breach") + 1 if "breach" in states else 0
        assert first == expected
        if expected:
            assert set(states[expected - 1 :]) == {"breach"}  # once breached, it stays breached


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=25),
    threshold=st.floats(min_value=-1e3, max_value=1e3),
    op=st.sampled_from([">", ">=", "<", "<="]),
    min_samples=st.integers(min_value=1, max_value=8),
)
def test_it_never_raises_its_p_value_as_looks_are_added(values, threshold, op, min_samples):
    previous = 1.0
    for k in range(1, len(values) + 1):
        result = sequential_evaluate(values[:k], op=op, threshold=threshold, min_samples=min_samples)
        assert 0.0 <= result.p_value <= previous
        assert (result.state == "breach") == (result.p_value <= ALPHA and result.n >= result.needed)
        previous = result.p_value


def _boundary_paths(seed: int) -> np.ndarray:
    # the worst case for false alarms: the true mean exactly at the threshold (1.0), noise SD 0.5
    return 1.0 + 0.5 * np.random.default_rng(seed).standard_normal((SIMS, LOOKS))


def test_it_holds_alpha_over_200_looks_at_the_threshold():
    false_alarms = (first_breach(_boundary_paths(11), op=">", threshold=1.0) > 0).mean()
    assert false_alarms <= _mc_bound(ALPHA, SIMS)


def test_it_would_fail_for_a_t_test_repeated_at_every_look():
    # the check above has power: on the same kind of paths, a 5% t-test at every look from look 3
    # false-alarms far above alpha, and so does the mixture with the sample SD plugged in
    excess = breach_excess(_boundary_paths(12), op=">", threshold=1.0)
    assert naive_breach(excess, alpha=ALPHA).mean() > _mc_bound(ALPHA, SIMS)
    assert plugin_breach(excess, alpha=ALPHA).mean() > _mc_bound(ALPHA, SIMS)


def test_it_detects_a_2_sd_regression_within_200_looks():
    rng = np.random.default_rng(13)
    sims = 400
    paths = 1.0 + 2 * 0.5 + 0.5 * rng.standard_normal((sims, LOOKS))
    firsts = first_breach(paths, op=">", threshold=1.0)
    assert (firsts > 0).mean() > 0.9
    assert np.median(firsts[firsts > 0]) <= 10  # looks; about 6 in the calibration
