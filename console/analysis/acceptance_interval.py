"""The acceptance rate's confidence interval, the request the unit (docs/statistics.md, "The
acceptance rate's interval")."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import t as t_dist

from console.analysis.metrics import group_codes

# Drafting requests (clusters) for an acceptance interval: the fewest at which it held its
# coverage by simulation (0.937 at 12 requests, 0.928 at 10; docs/statistics.md).
MIN_INTERVAL_REQUESTS = 12


def acceptance_interval(
    request_steps: pd.DataFrame, keys: pd.DataFrame, *, by: Sequence[str], ci: float = 0.95
) -> pd.DataFrame:
    """A confidence interval for each group's acceptance rate (Σaccepted / Σdrafted), with the
    request as the independent unit: a request's repeats are summed into one cluster (they share
    its prompt, hence its predictability), and the ratio's standard error is the jackknife's
    over those clusters (leave one request out), with t(n - 1) for its quantile, n the requests
    that drafted. The linearised standard error sqrt(n/(n-1) x Σ(a_i - R d_i)^2) / Σd
    under-covered at small n (0.92 at 10 requests); the jackknife holds 0.93 from 12 (by
    simulation with a known rate: tests/analysis/test_acceptance_interval.py).

    ``request_steps`` is ``acceptance.steps_per_request``'s frame over ``keys``' rows, which
    carry ``request_id`` and the ``by`` columns. Columns: keys, ``acceptance_rate_lo`` and
    ``acceptance_rate_hi`` (clipped to [0, 1]; NaN for a group with fewer than
    ``MIN_INTERVAL_REQUESTS`` drafting requests).
    """
    group, out = group_codes(keys, list(by))
    lo, hi = np.full(len(out), np.nan), np.full(len(out), np.nan)
    rows = request_steps["row"].to_numpy()
    frame = pd.DataFrame(
        {
            "group": group[rows],
            "request": keys["request_id"].to_numpy()[rows],
            "drafted": request_steps["drafted"].to_numpy(dtype=float),
            "accepted": request_steps["accepted"].to_numpy(dtype=float),
        }
    )
    clusters = frame.groupby(["group", "request"], sort=False)[["drafted", "accepted"]].sum().reset_index()
    for g, part in clusters[clusters["drafted"] > 0].groupby("group", sort=False):
        n = len(part)
        if n < MIN_INTERVAL_REQUESTS:
            continue
        d, a = part["drafted"].to_numpy(), part["accepted"].to_numpy()
        rate = a.sum() / d.sum()
        leave_one_out = (a.sum() - a) / (d.sum() - d)
        se = np.sqrt((n - 1) / n * np.sum((leave_one_out - leave_one_out.mean()) ** 2))
        half = float(t_dist.ppf(1 - (1 - ci) / 2, n - 1)) * se
        lo[int(g)], hi[int(g)] = max(rate - half, 0.0), min(rate + half, 1.0)
    out["acceptance_rate_lo"] = lo
    out["acceptance_rate_hi"] = hi
    return out
