"""Intervals and p-values from the request-clustered bootstrap distributions of
:mod:`.bootstrap`, the paired candidate-minus-baseline comparison of one statistic, and Holm's
correction.

Pure numpy/scipy; no Django.

Intervals
---------
Means: the point difference +- t(n - 1) x its bootstrap standard error, n the number of
requests (the percentile interval of a mean is too narrow at small n and heavy tails: 0.87
coverage at n = 10). Percentiles: the percentile interval of the bootstrap differences (for
quantile differences it holds its coverage where the reporting rule lets a value through; BCa,
with a jackknife acceleration that is unreliable for non-smooth statistics, did not: 0.85-0.92).
Both measured by simulation with a known truth; see ``docs/statistics.md`` and ``calibrate``.
:func:`mc_error_rel` estimates the Monte Carlo error of each bound from the replicates
themselves, as a fraction of the interval's width; ``DEFAULT_N_BOOT`` keeps it near 1%.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import t as t_dist

from console.analysis.comparison.bootstrap import NOT_MEASURED_SMALL_N, min_requests, reportable, stat_q


def interval_percentile(boot: np.ndarray, *, ci: float = 0.95) -> tuple[float, float]:
    """Two-sided percentile interval of a bootstrap distribution (NaN replicates ignored)."""
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.quantile(boot, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    return float(lo), float(hi)


def interval_studentized(
    boot: np.ndarray, *, point: float, n_requests: int, ci: float = 0.95
) -> tuple[float, float, float]:
    """``point`` +- t(n - 1) x the bootstrap standard error: ``(lo, hi, se)``. Used for means,
    where the percentile interval is too narrow at small n (``docs/statistics.md``)."""
    boot = boot[np.isfinite(boot)]
    if boot.size < 2 or not np.isfinite(point) or n_requests < 2:
        return float("nan"), float("nan"), float("nan")
    se = float(np.std(boot, ddof=1))
    half = float(t_dist.ppf(1 - (1 - ci) / 2, n_requests - 1)) * se
    return point - half, point + half, se


def p_value_percentile(boot: np.ndarray, *, null: float = 0.0) -> float:
    """Two-sided bootstrap p-value of ``null`` (the percentile interval inverted), with the
    (count + 1) / (B + 1) correction so it is never 0."""
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return float("nan")
    b = boot.size
    low = (np.count_nonzero(boot <= null) + 1) / (b + 1)
    high = (np.count_nonzero(boot >= null) + 1) / (b + 1)
    return float(min(1.0, 2 * min(low, high)))


def p_value_studentized(*, point: float, se: float, n_requests: int) -> float:
    """Two-sided t-test p-value of 0 for ``point`` with bootstrap standard error ``se``."""
    if not (np.isfinite(point) and np.isfinite(se)) or n_requests < 2:
        return float("nan")
    if se <= 0:
        return 1.0 if point == 0 else 0.0
    return float(2 * t_dist.sf(abs(point) / se, n_requests - 1))


def mc_error_rel(boot: np.ndarray, *, lo: float, hi: float) -> float:
    """Monte Carlo error of the interval's bounds, as a fraction of its width: the spread of the
    order statistics one binomial standard deviation around each bound's rank, halved; the
    larger of the two bounds. NaN when the width is zero or unknown."""
    boot = np.sort(boot[np.isfinite(boot)])
    b = boot.size
    width = hi - lo
    if b < 10 or not (np.isfinite(width) and width > 0):
        return float("nan")
    errors = []
    for bound in (lo, hi):
        p = float(np.searchsorted(boot, bound)) / b
        d = np.sqrt(b * max(p * (1 - p), 1.0 / b))
        k = p * b
        a = boot[int(np.clip(np.floor(k - d), 0, b - 1))]
        c = boot[int(np.clip(np.ceil(k + d), 0, b - 1))]
        errors.append((c - a) / 2.0)
    return float(max(errors) / width)


def paired_delta(
    *,
    stat: str,
    base_point: float,
    cand_point: float,
    base_boot: np.ndarray,
    cand_boot: np.ndarray,
    n_requests: int,
    ci: float = 0.95,
) -> dict[str, object]:
    """A candidate-minus-baseline comparison of one statistic, from the two arms' bootstrap
    distributions on the same (request-clustered) replicates.

    ``n_requests`` is the number of distinct requests with a value in both arms. Returns
    ``base``, ``cand``, ``delta`` (cand - base, in the metric's unit), ``delta_lo``/``delta_hi``,
    ``ratio`` (cand / base) with ``ratio_lo``/``ratio_hi``, ``p_value`` (two-sided, of delta = 0),
    ``mc_error_rel`` (Monte Carlo error of the bounds as a fraction of the width), ``method``
    (``"studentized"`` for means, ``"percentile"`` for pNN), ``measured`` (False when the
    reporting rule says the sample is too small: then the interval, p-value and ratio bounds are
    NaN) and ``reason``.
    """
    delta = cand_point - base_point
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = cand_point / base_point if base_point != 0 else float("nan")
        diff_boot = cand_boot - base_boot
        ratio_boot = np.where(base_boot != 0, cand_boot / np.where(base_boot != 0, base_boot, 1), np.nan)
    out: dict[str, object] = {
        "base": base_point,
        "cand": cand_point,
        "delta": delta,
        "ratio": float(ratio),
        "n_requests": int(n_requests),
    }
    nan = float("nan")
    method = "studentized" if stat_q(stat) is None else "percentile"
    empty = {"delta_lo": nan, "delta_hi": nan, "ratio_lo": nan, "ratio_hi": nan, "p_value": nan}
    if not reportable(n_requests, stat):
        return out | empty | {
            "mc_error_rel": nan,
            "method": method,
            "measured": False,
            "reason": f"{NOT_MEASURED_SMALL_N}: {n_requests} requests, {stat} needs {min_requests(stat)}",
        }
    if not (np.isfinite(base_point) and np.isfinite(cand_point)):
        return out | empty | {"mc_error_rel": nan, "method": method, "measured": False, "reason": "no data"}
    if method == "studentized":
        lo, hi, se = interval_studentized(diff_boot, point=delta, n_requests=n_requests, ci=ci)
        r_lo, r_hi, _ = interval_studentized(ratio_boot, point=float(ratio), n_requests=n_requests, ci=ci)
        p = p_value_studentized(point=delta, se=se, n_requests=n_requests)
        finite = diff_boot[np.isfinite(diff_boot)]
        # The bounds' Monte Carlo error comes from the standard error's: about 1 / sqrt(2B).
        mc = 1.0 / np.sqrt(2.0 * max(finite.size - 1, 1)) / 2.0 if np.isfinite(lo) and hi > lo else nan
    else:
        lo, hi = interval_percentile(diff_boot, ci=ci)
        r_lo, r_hi = interval_percentile(ratio_boot, ci=ci)
        p = p_value_percentile(diff_boot)
        mc = mc_error_rel(diff_boot, lo=lo, hi=hi)
    # Every statistic compared here is non-negative (seconds, rates, requests/s, bytes), so is the
    # ratio: a bound below zero (a wide studentized interval) is clamped to 0, which only widens
    # what the interval covers of the possible values and never shows an impossible ratio.
    r_lo, r_hi = (max(float(b), 0.0) if np.isfinite(b) else b for b in (r_lo, r_hi))
    return out | {
        "delta_lo": lo,
        "delta_hi": hi,
        "ratio_lo": r_lo,
        "ratio_hi": r_hi,
        "p_value": p,
        "mc_error_rel": float(mc),
        "method": method,
        "measured": bool(np.isfinite(lo) and np.isfinite(hi)),
        "reason": None if np.isfinite(lo) and np.isfinite(hi) else "no bootstrap distribution",
    }


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (NaN stays NaN and does not count as a test)."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.size, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = idx.size
    if m == 0:
        return out.tolist()
    order = idx[np.argsort(p[idx], kind="stable")]
    running = 0.0
    for i, j in enumerate(order):
        running = max(running, min(1.0, (m - i) * p[j]))
        out[j] = running
    return out.tolist()
