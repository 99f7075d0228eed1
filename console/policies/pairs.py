"""Slice policies' paired units: candidate rows paired with the baseline, one unit per
(candidate arm, request), and the interval of a benefit. Pure functions; no Django. Seconds.
The pipeline is told in :mod:`console.policies.fitting`.

2. :func:`pairs_build`: each candidate row is paired with the baseline row of the same load,
   request and repeat. ``benefit`` = baseline metric - candidate metric (seconds; positive = the
   candidate is faster). ``success`` = completed, within the class deadlines and valid output;
   ``regression`` = a quality check (JSON, schema, tool call) passed for the baseline and failed
   for the candidate.
3. :func:`units_build`: one unit per (candidate arm, request): the mean benefit over its repeats
   (and loads, when several are pooled), the mean success change and whether any pair regressed.
   Requests, not repeats, are the sampling unit: repeats of one request are not independent.

Intervals
---------
``stat="mean"``: Student t interval of the mean of unit benefits (``mean +- t * sd / sqrt(n)``).
``stat="p50"``: the distribution-free interval of the median from order statistics
``(x_(j), x_(n-j+1))`` with ``j = binom.ppf((1 - ci) / 2, n, 1/2)`` (the sign-test interval:
deterministic; its exact coverage, 1 - 2 binom.cdf(j - 1), is at least ``ci``). NaN when n is
too small for one (j < 1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

# Selectable metrics: name -> (per-request column in seconds, statistic over units, label).
METRICS: dict[str, tuple[str, str, str]] = {
    "tpot_s": ("tpot_s", "mean", "TPOT, mean of paired per-request savings"),
    "tpot_s_p50": ("tpot_s", "p50", "TPOT, median of paired per-request savings"),
    "e2e_s": ("e2e_s", "mean", "end-to-end latency, mean of paired savings"),
    "e2e_s_p50": ("e2e_s", "p50", "end-to-end latency, median of paired savings"),
    "ttft_s": ("ttft_s", "mean", "TTFT, mean of paired savings"),
}

PAIR_KEYS: tuple[str, ...] = ("load", "request_id", "repeat")
QUALITY_CHECKS: tuple[str, ...] = ("json_valid", "schema_valid", "tool_valid")


def pairs_build(derived: pd.DataFrame, *, baseline_arm: str, metric: str) -> pd.DataFrame:
    """Candidate rows paired with their baseline row (same load, request, repeat).

    ``derived`` holds :func:`console.analysis.metrics.requests_derive`'s columns (``completed``,
    ``met_deadline`` and the metric column) and optionally the quality flags of
    :func:`console.analysis.quality.quality_flags` (missing = valid, no regression).
    Columns: ``arm``, ``load``, ``request_id``, ``repeat``, ``base``/``cand`` (the metric,
    seconds), ``benefit`` (base - cand, seconds; NaN when either is undefined), ``base_success``,
    ``cand_success`` (bool) and ``regression`` (bool).
    """
    column = METRICS[metric][0]
    frame = derived.copy()
    valid = frame["output_valid"].to_numpy(dtype=bool) if "output_valid" in frame else True
    frame["_success"] = (
        frame["completed"].to_numpy(dtype=bool) & frame["met_deadline"].to_numpy(dtype=bool) & valid
    )
    checks = [c for c in QUALITY_CHECKS if c in frame]
    keep = [*PAIR_KEYS, column, "_success", *checks]
    base = frame.loc[frame["arm"] == baseline_arm, keep].drop_duplicates(list(PAIR_KEYS))
    cand = frame.loc[frame["arm"] != baseline_arm, ["arm", *keep]]
    merged = cand.merge(base, on=list(PAIR_KEYS), suffixes=("_cand", "_base"), how="inner")
    regression = np.zeros(len(merged), dtype=bool)
    for c in checks:
        b = merged[f"{c}_base"].astype("boolean")
        k = merged[f"{c}_cand"].astype("boolean")
        regression |= ((b == True) & (k == False)).fillna(False).to_numpy(dtype=bool)  # noqa: E712
    out = pd.DataFrame(
        {
            "arm": merged["arm"].to_numpy(),
            "load": merged["load"].to_numpy(),
            "request_id": merged["request_id"].to_numpy(),
            "repeat": merged["repeat"].to_numpy(),
            "base": merged[f"{column}_base"].to_numpy(dtype=float),
            "cand": merged[f"{column}_cand"].to_numpy(dtype=float),
            "base_success": merged["_success_base"].to_numpy(dtype=bool),
            "cand_success": merged["_success_cand"].to_numpy(dtype=bool),
            "regression": regression,
        }
    )
    out["benefit"] = out["base"] - out["cand"]
    return out


def units_build(pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per (``arm``, ``request_id``): ``benefit`` (mean over its pairs with a defined
    benefit, seconds; NaN when none), ``success_delta`` (mean of cand_success - base_success over
    its pairs, in [-1, 1]), ``regression`` (any pair regressed), ``n_pairs``."""
    frame = pairs.assign(
        _delta=pairs["cand_success"].astype(float) - pairs["base_success"].astype(float),
    )
    grouped = frame.groupby(["arm", "request_id"], sort=True)
    out = pd.DataFrame(
        {
            "benefit": grouped["benefit"].mean(),
            "success_delta": grouped["_delta"].mean(),
            "regression": grouped["regression"].any(),
            "n_pairs": grouped.size(),
        }
    ).reset_index()
    return out


def benefit_interval(values: np.ndarray, *, stat: str, ci: float = 0.95) -> tuple[float, float, float]:
    """(point, lo, hi) of ``stat`` ("mean" or "p50") of the finite ``values`` (seconds): mean with a
    Student t interval, median with the order-statistic interval (module docstring). (NaN, NaN,
    NaN) when empty; lo = hi = NaN when too few values for an interval."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    n = values.size
    nan = float("nan")
    if n == 0:
        return nan, nan, nan
    if stat == "mean":
        point = float(values.mean())
        if n < 2:
            return point, nan, nan
        half = float(sps.t.ppf((1 + ci) / 2, n - 1)) * float(values.std(ddof=1)) / float(np.sqrt(n))
        return point, point - half, point + half
    if stat != "p50":
        raise ValueError(f"unknown statistic {stat!r}: use 'mean' or 'p50'")
    ordered = np.sort(values)
    point = float(np.median(ordered))
    j = int(sps.binom.ppf((1 - ci) / 2, n, 0.5))
    if j < 1:
        return point, nan, nan
    return point, float(ordered[j - 1]), float(ordered[n - j])
