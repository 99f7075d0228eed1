"""The acceptance rate's interval (console.analysis.acceptance_interval) holds its
stated coverage, checked by simulation against a known rate: heterogeneous requests (each its own
chance of a draft token being accepted), several repeats of each, step counts that depend on the
request's acceptance (a request that accepts more needs fewer target passes), as a real trace
gives. Treating each repeat as independent does not hold coverage: the request is the unit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from console.analysis.acceptance_interval import MIN_INTERVAL_REQUESTS, acceptance_interval

K = 4  # draft length
BETA = (2.0, 1.2)  # per-request acceptance chance ~ Beta: mean 0.63, wide spread


def _mean_accepted(p: np.ndarray) -> np.ndarray:
    """E[accepted per step] for a per-token chance p and draft length K: Σ_j p^j."""
    return sum(p**j for j in range(1, K + 1))


def _steps(p: np.ndarray, length: np.ndarray) -> np.ndarray:
    return np.ceil(length / (1 + _mean_accepted(p))).astype(np.int64)


def _truth(rng: np.random.Generator) -> float:
    """The population's Σaccepted / Σdrafted, from expectations over a million requests."""
    p = rng.beta(*BETA, size=1_000_000)
    length = rng.integers(20, 200, size=p.size)
    steps = _steps(p, length)
    return float(np.sum(steps * _mean_accepted(p)) / (K * np.sum(steps)))


def _experiments(rng: np.random.Generator, *, n_sims: int, n_requests: int, repeats: int):
    """``n_sims`` experiments as one frame, each its own group (``arm``): per request-repeat
    its summed drafted and accepted tokens, as steps_per_request gives them."""
    p = rng.beta(*BETA, size=(n_sims, n_requests))
    length = rng.integers(20, 200, size=(n_sims, n_requests))
    steps = _steps(p, length)
    sims, requests = np.meshgrid(np.arange(n_sims), np.arange(n_requests), indexing="ij")
    rows_p = np.repeat(p.ravel(), repeats)
    rows_steps = np.repeat(steps.ravel(), repeats)
    # each step accepts the run of successes before the first failure, at most K
    step_p = np.repeat(rows_p, rows_steps)
    per_step = np.minimum(rng.geometric(1 - step_p) - 1, K)
    owner = np.repeat(np.arange(rows_p.size), rows_steps)
    accepted = np.bincount(owner, weights=per_step, minlength=rows_p.size).astype(np.int64)
    keys = pd.DataFrame(
        {
            "arm": np.repeat(sims.ravel(), repeats),
            "request_id": np.repeat(requests.ravel(), repeats),
            "repeat": np.tile(np.arange(repeats), n_sims * n_requests),
        }
    )
    request_steps = pd.DataFrame(
        {"row": np.arange(len(keys)), "n_steps": rows_steps, "drafted": K * rows_steps, "accepted": accepted}
    )
    return keys, request_steps


@pytest.mark.parametrize(("n_requests", "repeats"), [(MIN_INTERVAL_REQUESTS, 3), (40, 3), (200, 1)])
def test_coverage_holds_with_a_known_rate(n_requests, repeats):
    rng = np.random.default_rng(20261204 + n_requests)
    truth = _truth(rng)
    n_sims = 2000
    keys, request_steps = _experiments(rng, n_sims=n_sims, n_requests=n_requests, repeats=repeats)
    out = acceptance_interval(request_steps, keys, by=["arm"])
    assert len(out) == n_sims and out[["acceptance_rate_lo", "acceptance_rate_hi"]].notna().all().all()
    covered = (out["acceptance_rate_lo"] <= truth) & (truth <= out["acceptance_rate_hi"])
    # the project's target (coverage >= 0.93 at nominal 0.95, docs/statistics.md), missed only
    # beyond two Monte Carlo errors (2000 experiments: 0.005 each)
    assert 0.92 <= covered.mean() <= 0.97, (n_requests, repeats, covered.mean(), truth)


def test_repeats_as_independent_units_undercover():
    """The same data with each repeat its own unit: intervals too narrow (the reason the
    request is the cluster)."""
    rng = np.random.default_rng(7)
    truth = _truth(rng)
    keys, request_steps = _experiments(rng, n_sims=2000, n_requests=MIN_INTERVAL_REQUESTS, repeats=5)
    wrong = keys.assign(request_id=keys["request_id"] * 10 + keys["repeat"])
    right = acceptance_interval(request_steps, keys, by=["arm"])
    naive = acceptance_interval(request_steps, wrong, by=["arm"])
    cover = lambda o: ((o["acceptance_rate_lo"] <= truth) & (truth <= o["acceptance_rate_hi"])).mean()  # noqa: E731
    assert cover(naive) < 0.85 < 0.93 <= cover(right)


def test_the_interval_holds_the_point_and_stays_in_zero_one():
    keys = pd.DataFrame({"arm": ["c"] * 12, "load": ["1x"] * 12, "request_id": [f"r{i}" for i in range(12)]})
    accepted = [4] * 11 + [0]
    request_steps = pd.DataFrame(
        {"row": range(12), "n_steps": [1] * 12, "drafted": [4] * 12, "accepted": accepted}
    )
    out = acceptance_interval(request_steps, keys, by=["arm", "load"]).iloc[0]
    rate = sum(accepted) / 48
    assert out["acceptance_rate_lo"] < rate <= out["acceptance_rate_hi"] == 1.0
    # by hand: the jackknife over the 12 requests (11 leave out a 4/4, one the 0/4), t(11)
    leave_out = np.array([(44 - 4) / 44] * 11 + [44 / 44])
    se = np.sqrt(11 / 12 * np.sum((leave_out - leave_out.mean()) ** 2))
    assert out["acceptance_rate_lo"] == pytest.approx(rate - 2.200985 * se, rel=1e-5)


def test_too_few_drafting_requests_give_no_interval():
    n = MIN_INTERVAL_REQUESTS
    keys = pd.DataFrame({"arm": ["c"] * n + ["b"] * n, "request_id": list(range(n)) * 2})
    # arm c: one request drafted nothing, so only n - 1 drafting requests; arm b never speculated
    request_steps = pd.DataFrame(
        {"row": range(n), "n_steps": [2] * n, "drafted": [0] + [6] * (n - 1), "accepted": [0] + [3] * (n - 1)}
    )
    out = acceptance_interval(request_steps, keys, by=["arm"]).set_index("arm")
    assert out[["acceptance_rate_lo", "acceptance_rate_hi"]].isna().all().all()
    empty = acceptance_interval(request_steps.iloc[0:0], keys, by=["arm"])
    assert empty["acceptance_rate_lo"].isna().all() and len(empty) == 2
