"""The request-clustered, paired bootstrap: the resampler that gives every statistic's
distribution on shared replicates, and the rule that says when a statistic has enough requests
behind it to be reported at all. Intervals and p-values from those distributions are in
:mod:`.intervals`.

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
from dataclasses import dataclass

import numpy as np
import pandas as pd

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


def _dedupe(
    columns: Mapping[Hashable, np.ndarray], stats: Mapping[Hashable, Sequence[str]]
) -> tuple[dict[Hashable, Hashable], dict[Hashable, list[str]]]:
    """Identical columns (a baseline paired with each candidate over the same requests) are
    evaluated once: every key maps to the first key with the same values. Returns that map and
    the statistics each first key needs."""
    canonical: dict[Hashable, Hashable] = {}
    first_of: dict[bytes, Hashable] = {}
    work: dict[Hashable, list[str]] = {}
    for k in columns:
        column = np.asarray(columns[k], dtype=float)
        c = canonical[k] = first_of.setdefault(column.tobytes(), k)
        for stat in stats.get(k, ()):
            if stat not in work.setdefault(c, []):
                work[c].append(stat)
    return canonical, work


@dataclass
class _Design:
    """One matrix product gives, per replicate: valid count, sum, and counts below each window.
    Identical matrix columns (e.g. the same validity mask for a candidate and its baseline) are
    computed once. Counting columns (0/1 indicators: integer products, exact in float32) and
    value sums (float64) go into two matrices."""

    count_matrix: np.ndarray
    sum_matrix: np.ndarray | None
    pos: dict[tuple[Hashable, str], int]
    quantiles: dict[tuple[Hashable, str], _Quantile]

    @classmethod
    def build(
        cls, columns: Mapping[Hashable, np.ndarray], stats: Mapping[Hashable, Sequence[str]], *, cluster_size: int
    ) -> _Design:
        values = {k: np.asarray(columns[k], dtype=float) for k in stats}
        valid = {k: np.isfinite(v) for k, v in values.items()}
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
        for k in stats:
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
        sum_matrix = np.column_stack(sum_cols) if sum_cols else None
        return cls(count_matrix=np.column_stack(count_cols), sum_matrix=sum_matrix, pos=pos, quantiles=quantiles)

    def evaluate(
        self,
        counts: np.ndarray,
        stats: Mapping[Hashable, Sequence[str]],
        parts: dict[tuple[Hashable, str], list[np.ndarray]],
    ) -> None:
        """Appends each statistic's values on the replicates of ``counts`` to ``parts``."""
        pos = self.pos
        prod = (counts @ self.count_matrix).astype(np.float64)
        sums = _sums(counts, self.sum_matrix) if self.sum_matrix is not None else None
        for k in stats:
            nb = prod[:, pos[(k, "_n")]]
            for stat in stats.get(k, ()):
                if stat == "mean":
                    assert sums is not None
                    with np.errstate(invalid="ignore", divide="ignore"):
                        parts[(k, stat)].append(sums[:, pos[(k, "_sum")]] / nb)
                else:
                    below = prod[:, pos[(k, stat)]]
                    parts[(k, stat)].append(self.quantiles[(k, stat)].evaluate(counts, nb, below))


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
    canonical, stats = _dedupe(columns, stats)
    keys = list(stats)
    design = _Design.build(columns, stats, cluster_size=cluster_size)
    parts: dict[tuple[Hashable, str], list[np.ndarray]] = {(k, s): [] for k in keys for s in stats.get(k, ())}
    if n_clusters == 0:
        return {key: np.full(n_boot, np.nan) for key in requested}
    for counts in _count_blocks(codes, n_clusters, n_boot=n_boot, seed=seed):
        design.evaluate(counts, stats, parts)
    result = {key: np.concatenate(chunks) for key, chunks in parts.items()}
    return {(k, s): result[(canonical[k], s)] for k, s in requested}
