"""The request-clustered, paired bootstrap: distributions, intervals, p-values, and the rule
that says when a statistic has enough requests behind it to be reported at all.

Pure numpy/pandas; no Django.

The unit of resampling is the request
-------------------------------------
A request is replayed once per repeat and once per arm; those rows share the request's own
difficulty (its prompt, its output length), so they are not independent draws. Every bootstrap
replicate draws request ids (``clusters``) with replacement, ``n`` of ``n``, and every row of a
drawn request comes with it: all its repeats, in every arm. A candidate and its baseline are
therefore always evaluated on the same drawn requests (paired), and the R repeats of a request
count once, not R times (clustered). Resampling rows within each repeat instead treats the R
copies as independent and makes intervals too narrow (see ``docs/statistics.md``, and
``python manage.py calibrate``).

A column may hold NaN (metric undefined, request outside the slice, no counterpart): those rows
weigh 0 in every replicate.

Statistics are ``mean`` and ``pNN`` (numpy's default linear interpolation, the same definition as
the point estimate). Percentiles are evaluated on a window of order statistics around the target
rank; a replicate whose rank falls outside it is recomputed in full, so the result is exact.

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

Reporting rule
--------------
A percentile ``pNN`` of a sample of ``n`` requests is reported only when at least
``MIN_TAIL_REQUESTS`` requests lie beyond it (``n * min(q, 1 - q) >= MIN_TAIL_REQUESTS``); a mean
needs ``MIN_MEAN_REQUESTS`` requests. Below that the statistic is ``not measured (n too small)``:
no interval, no verdict. The thresholds are the smallest for which ``calibrate`` shows coverage
holding (>= 0.93 at nominal 0.95) in every scenario where a value is reported.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import t as t_dist

BLOCK_ELEMENTS = 10_000_000  # counts per block of replicates (memory: 4 bytes each)
SUB_BLOCK_ELEMENTS = 500_000  # counts drawn at once within a block
WINDOW_SDS = 4.0  # half-width of the order-statistic window, in binomial standard deviations
DEFAULT_N_BOOT = 5000  # Monte Carlo error of a 95% bound ~1% of the interval's width
MIN_TAIL_REQUESTS = 2  # requests beyond a percentile for it to be reported
MIN_MEAN_REQUESTS = 10  # requests for a mean to be reported
NOT_MEASURED_SMALL_N = "not measured (n too small)"


def stat_q(stat: str) -> float | None:
    """The quantile (0..1) of ``"pNN"``; None for ``"mean"``."""
    if stat == "mean":
        return None
    if not stat.startswith("p"):
        raise ValueError(f"unknown statistic {stat!r}: use 'mean' or 'pNN'")
    return float(stat[1:]) / 100.0


def min_requests(stat: str) -> int:
    """The fewest requests for which ``stat`` is reported (see the module's reporting rule)."""
    q = stat_q(stat)
    if q is None:
        return MIN_MEAN_REQUESTS
    tail = min(q, 1.0 - q)
    if tail <= 0:
        return 2**31  # p0 / p100: the sample extreme, never an estimate with an interval
    return max(MIN_MEAN_REQUESTS, int(np.ceil(MIN_TAIL_REQUESTS / tail - 1e-9)))


def reportable(n_requests: int, stat: str) -> bool:
    """Whether ``stat`` over ``n_requests`` requests has enough requests behind it."""
    return int(n_requests) >= min_requests(stat)


def point_stat(values: np.ndarray, stat: str) -> float:
    """``stat`` of the finite values (NaN when none)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan")
    q = stat_q(stat)
    return float(values.mean()) if q is None else float(np.percentile(values, q * 100.0))


def _count_blocks(cluster_codes: np.ndarray, n_clusters: int, *, n_boot: int, seed: int) -> Iterator[np.ndarray]:
    """Yield float32 count matrices (replicates x rows), ``n_boot`` replicates in total: each
    replicate draws ``n_clusters`` request ids with replacement and every row counts as often as
    its request was drawn. Matrices are Fortran-ordered (each row's counts contiguous)."""
    rng = np.random.default_rng(seed)
    n_rows = int(cluster_codes.size)
    block = max(1, min(n_boot, BLOCK_ELEMENTS // max(n_rows, n_clusters, 1)))
    # one row per request, in order (one repeat): the per-request counts are the row counts
    identity = n_rows == n_clusters and bool((cluster_codes == np.arange(n_rows)).all())
    done = 0
    while done < n_boot:
        b = min(block, n_boot - done)
        counts = np.empty((b, n_rows), dtype=np.float32, order="F")
        # Drawn a few replicates at a time: the buffers stay small enough for malloc to reuse
        # them, where one block-sized buffer meant fresh pages (and page faults) every time.
        step = max(1, SUB_BLOCK_ELEMENTS // max(n_clusters, 1))
        for r0 in range(0, b, step):
            m = min(step, b - r0)
            dtype = np.int32 if m * n_clusters < 2**31 else np.int64
            draws = rng.integers(0, n_clusters, size=(m, n_clusters), dtype=dtype)
            # replicate r's draws count into its own row (offset r * n_clusters)
            np.add(draws, (np.arange(m, dtype=dtype) * n_clusters)[:, None], out=draws)
            per_cluster = np.bincount(draws.ravel(), minlength=m * n_clusters).reshape(m, n_clusters)
            # float32 holds counts and sums of counts below 2**24 exactly
            counts[r0 : r0 + m] = per_cluster if identity else per_cluster[:, cluster_codes]
        yield counts
        done += b


def _sums(counts: np.ndarray, sum_matrix: np.ndarray) -> np.ndarray:
    """``counts @ sum_matrix`` in float64, a few replicates at a time (small buffers)."""
    out = np.empty((counts.shape[0], sum_matrix.shape[1]))
    step = max(1, SUB_BLOCK_ELEMENTS // max(counts.shape[1], 1))
    for r0 in range(0, counts.shape[0], step):
        out[r0 : r0 + step] = counts[r0 : r0 + step].astype(np.float64) @ sum_matrix
    return out


def _finite_order(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Positions of the valid values, ordered by value (stable)."""
    idx = np.flatnonzero(valid)
    return idx[np.argsort(values[idx], kind="stable")]


class _Quantile:
    """Evaluates one percentile of one column on count matrices, via a window of order stats."""

    def __init__(self, values: np.ndarray, sorted_idx: np.ndarray, q: float, *, cluster_size: int):
        """``sorted_idx``: the positions of the finite ``values``, in increasing order of value
        (:func:`_finite_order`; shared by every percentile of a column)."""
        self.sorted_idx = sorted_idx
        self.sorted_values = values[self.sorted_idx]
        self.q = q
        m = sorted_idx.size
        # Clustered counts vary up to cluster_size times more than multinomial ones.
        var = max(m, 1) * max(q * (1 - q), 0.01) * max(cluster_size, 1)
        margin = WINDOW_SDS * np.sqrt(var) + 5
        center = q * max(m - 1, 0)
        self.start = int(max(0, np.floor(center - margin)))
        self.stop = int(min(m, np.ceil(center + margin) + 2))
        self.below = np.zeros(values.size)
        self.below[self.sorted_idx[: self.start]] = 1.0

    def evaluate(self, counts: np.ndarray, nb: np.ndarray, below: np.ndarray) -> np.ndarray:
        b = counts.shape[0]
        out = np.full(b, np.nan)
        if self.sorted_idx.size == 0:
            return out
        window = counts[:, self.sorted_idx[self.start : self.stop]].T
        cs = np.cumsum(window, axis=0)  # float32: integer counts below 2**24 stay exact
        cs += below.astype(np.float32)[None, :]
        h = self.q * (nb - 1)
        lo = np.floor(h)
        frac = h - lo
        hi = np.minimum(lo + 1, nb - 1)
        ok = nb > 0
        vals = []
        for p in (lo, hi):
            inside = ok & (below <= p) & (cs[-1] > p)
            j = np.argmax(cs > p[None, :], axis=0) + self.start
            for r in np.flatnonzero(ok & ~inside):
                full = np.cumsum(counts[r, self.sorted_idx], dtype=np.float64)
                j[r] = np.searchsorted(full, p[r], side="right")
            j = np.clip(j, 0, self.sorted_values.size - 1)
            vals.append(self.sorted_values[j])
        out[ok] = (vals[0] + frac * (vals[1] - vals[0]))[ok]
        return out


def _cluster_codes(clusters: np.ndarray | None, n: int) -> tuple[np.ndarray, int, int]:
    if clusters is None:
        codes = np.arange(n, dtype=np.int64)
    else:
        codes, _ = pd.factorize(np.asarray(clusters))
        codes = codes.astype(np.int64)
        if (codes < 0).any():
            raise ValueError("clusters must not contain missing values")
    n_clusters = int(codes.max()) + 1 if codes.size else 0
    size = int(np.bincount(codes).max()) if codes.size else 1
    return codes, n_clusters, size


def bootstrap_distributions(
    columns: Mapping[Hashable, np.ndarray],
    *,
    stats: Mapping[Hashable, Sequence[str]],
    clusters: np.ndarray | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> dict[tuple[Hashable, str], np.ndarray]:
    """Bootstrap distribution of each ``stat`` of each column, all on the same replicates.

    ``columns`` maps a key to an array over the same rows (NaN = absent); ``stats`` maps the key
    to statistics (``"mean"``, ``"p50"``, ...); ``clusters`` (same length: the request id of each
    row) is the unit drawn with replacement; None means every row is its own unit. Returns
    ``{(key, stat): array of n_boot}``.
    """
    keys = list(columns)
    if not keys:
        return {}
    n = np.asarray(columns[keys[0]]).size
    codes, n_clusters, cluster_size = _cluster_codes(clusters, n)
    requested = {(k, s): None for k in keys for s in stats.get(k, ())}
    # Identical columns (a baseline paired with each candidate over the same requests) are
    # evaluated once: every key maps to the first key with the same values.
    canonical: dict[Hashable, Hashable] = {}
    first_of: dict[bytes, Hashable] = {}
    work: dict[Hashable, list[str]] = {}
    for k in keys:
        column = np.asarray(columns[k], dtype=float)
        c = canonical[k] = first_of.setdefault(column.tobytes(), k)
        for stat in stats.get(k, ()):
            if stat not in work.setdefault(c, []):
                work[c].append(stat)
    stats, keys = work, list(work)
    values = {k: np.asarray(columns[k], dtype=float) for k in keys}
    valid = {k: np.isfinite(v) for k, v in values.items()}
    # One matrix product gives, per replicate: valid count, sum, and counts below each window.
    # Identical matrix columns (e.g. the same validity mask for a candidate and its baseline)
    # are computed once. Counting columns (0/1 indicators: integer products, exact in float32)
    # and value sums (float64) go into two matrices.
    count_cols: list[np.ndarray] = []
    sum_cols: list[np.ndarray] = []
    seen: dict[bytes, int] = {}

    def add(vec: np.ndarray) -> int:
        key = vec.tobytes()
        if key not in seen:
            seen[key] = len(count_cols)
            count_cols.append(vec)
        return seen[key]

    pos: dict[tuple[Hashable, str], int] = {}
    quantiles: dict[tuple[Hashable, str], _Quantile] = {}
    for k in keys:
        order = None
        pos[(k, "_n")] = add(valid[k].astype(np.float32))
        if "mean" in stats.get(k, ()):
            pos[(k, "_sum")] = len(sum_cols)
            sum_cols.append(np.where(valid[k], values[k], 0.0))
        for stat in stats.get(k, ()):
            q = stat_q(stat)
            if q is not None:
                order = _finite_order(values[k], valid[k]) if order is None else order
                quantiles[(k, stat)] = _Quantile(values[k], order, q, cluster_size=cluster_size)
                pos[(k, stat)] = add(quantiles[(k, stat)].below.astype(np.float32))
    count_matrix = np.column_stack(count_cols)
    sum_matrix = np.column_stack(sum_cols) if sum_cols else None
    parts: dict[tuple[Hashable, str], list[np.ndarray]] = {(k, s): [] for k in keys for s in stats.get(k, ())}
    if n_clusters == 0:
        return {key: np.full(n_boot, np.nan) for key in requested}
    for counts in _count_blocks(codes, n_clusters, n_boot=n_boot, seed=seed):
        prod = (counts @ count_matrix).astype(np.float64)
        sums = _sums(counts, sum_matrix) if sum_matrix is not None else None
        for k in keys:
            nb = prod[:, pos[(k, "_n")]]
            for stat in stats.get(k, ()):
                if stat == "mean":
                    assert sums is not None
                    with np.errstate(invalid="ignore", divide="ignore"):
                        parts[(k, stat)].append(sums[:, pos[(k, "_sum")]] / nb)
                else:
                    below = prod[:, pos[(k, stat)]]
                    parts[(k, stat)].append(quantiles[(k, stat)].evaluate(counts, nb, below))
    result = {key: np.concatenate(chunks) for key, chunks in parts.items()}
    return {(k, s): result[(canonical[k], s)] for k, s in requested}


# ---------------------------------------------------------------- intervals and p-values


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
