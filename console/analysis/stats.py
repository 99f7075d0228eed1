"""Bootstrap confidence intervals, paired comparisons, the A/A noise floor and knee detection,
and :func:`comparison_compute`, the one entry point the comparison page, the JSON export and the
decision gate call (its docstring documents the summary's schema).

Pure numpy/pandas; no Django.

Bootstrap
---------
Requests are resampled with replacement within each stratum (the repeat), ``n_boot`` times,
from a seeded ``numpy.random.Generator``. A resample is a matrix of counts (how often each
request was drawn); every column (metric, arm, slice) in one call is evaluated on the same
resamples, so a candidate and its baseline always see the same requests (paired). A column may
hold NaN (metric undefined, request outside the slice, no counterpart): those requests weigh 0 in
every resample, so the resample of a column is its defined requests drawn with a random total.

Statistics are ``mean`` and ``pNN`` (percentile with numpy's default linear interpolation, the
same definition as the point estimate). Percentiles are evaluated on a window of order statistics
around the target rank (``WINDOW_SDS`` binomial standard deviations each side); the rare resample
whose rank falls outside it is recomputed in full, so the result is exact. Intervals are percentile intervals at
level ``ci`` (two-sided). A difference is ``candidate - baseline``; a ratio is
``candidate / baseline``.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

BLOCK_ELEMENTS = 4_000_000  # counts per block of resamples (memory bound: 8 bytes each)
WINDOW_SDS = 4.0  # half-width of the order-statistic window, in binomial standard deviations


def _stat_q(stat: str) -> float | None:
    if stat == "mean":
        return None
    if not stat.startswith("p"):
        raise ValueError(f"unknown statistic {stat!r}: use 'mean' or 'pNN'")
    return float(stat[1:]) / 100.0


def point_stat(values: np.ndarray, stat: str) -> float:
    """``stat`` of the finite values (NaN when none)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan")
    q = _stat_q(stat)
    return float(values.mean()) if q is None else float(np.percentile(values, q * 100.0))


def _count_blocks(sizes: Sequence[int], *, n_boot: int, seed: int) -> Iterator[np.ndarray]:
    """Yield float32 count matrices (resamples x requests), ``n_boot`` rows in total. Requests
    are ordered by stratum: the first ``sizes[0]`` columns are stratum 0, and so on. Matrices are
    Fortran-ordered (each request's counts contiguous), which the gathers below rely on."""
    rng = np.random.default_rng(seed)
    n = int(sum(sizes))
    block = max(1, min(n_boot, BLOCK_ELEMENTS // max(n, 1)))
    done = 0
    while done < n_boot:
        b = min(block, n_boot - done)
        # requests x resamples; float32 holds counts and sums of counts below 2**24 exactly
        counts_t = np.empty((n, b), dtype=np.float32)
        start = 0
        for m in sizes:
            dtype = np.int32 if b * m < 2**31 else np.int64
            draws = rng.integers(0, m, size=(b, m), dtype=dtype)
            np.multiply(draws, b, out=draws)
            np.add(draws, np.arange(b, dtype=dtype)[:, None], out=draws)
            counts_t[start : start + m] = np.bincount(draws.ravel(), minlength=b * m).reshape(m, b)
            start += m
        yield counts_t.T
        done += b


class _Quantile:
    """Evaluates one percentile of one column on count matrices, via a window of order stats."""

    def __init__(self, values: np.ndarray, valid: np.ndarray, q: float):
        idx = np.flatnonzero(valid)
        order = np.argsort(values[idx], kind="stable")
        self.sorted_idx = idx[order]
        self.sorted_values = values[self.sorted_idx]
        self.q = q
        m = idx.size
        margin = WINDOW_SDS * np.sqrt(max(m, 1) * max(q * (1 - q), 0.01)) + 5
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
        # (window x resamples): counts is Fortran-ordered, so this is a contiguous gather and the
        # running sum goes down contiguous rows.
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


def bootstrap_distributions(
    columns: Mapping[Hashable, np.ndarray],
    *,
    stats: Mapping[Hashable, Sequence[str]],
    strata: np.ndarray | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[tuple[Hashable, str], np.ndarray]:
    """Bootstrap distribution of each ``stat`` of each column, all on the same resamples.

    ``columns`` maps a key to an array over the same requests (NaN = absent); ``stats`` maps the
    key to statistics (``"mean"``, ``"p50"``, ...); ``strata`` (same length, e.g. the repeat)
    restricts resampling to within each stratum. Returns ``{(key, stat): array of n_boot}``.
    """
    keys = list(columns)
    if not keys:
        return {}
    n = np.asarray(columns[keys[0]]).size
    strata = np.zeros(n, dtype=np.int64) if strata is None else np.asarray(strata)
    # Order requests by stratum so that each stratum is a contiguous block of columns.
    codes, _ = pd.factorize(strata)
    perm = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes).tolist()
    values = {k: np.asarray(columns[k], dtype=float)[perm] for k in keys}
    valid = {k: np.isfinite(v) for k, v in values.items()}
    # One matrix product gives, per resample: valid count, sum, and counts below each window.
    # Identical matrix columns (e.g. the same validity mask for a candidate and its baseline)
    # are computed once.
    # Counting columns (0/1 indicators: integer products, exact in float32) and value sums
    # (float64) go into two matrices.
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
        pos[(k, "_n")] = add(valid[k].astype(np.float32))
        if "mean" in stats.get(k, ()):
            pos[(k, "_sum")] = len(sum_cols)
            sum_cols.append(np.where(valid[k], values[k], 0.0))
        for stat in stats.get(k, ()):
            q = _stat_q(stat)
            if q is not None:
                quantiles[(k, stat)] = _Quantile(values[k], valid[k], q)
                pos[(k, stat)] = add(quantiles[(k, stat)].below.astype(np.float32))
    count_matrix = np.column_stack(count_cols)
    sum_matrix = np.column_stack(sum_cols) if sum_cols else None
    parts: dict[tuple[Hashable, str], list[np.ndarray]] = {(k, s): [] for k in keys for s in stats.get(k, ())}
    for counts in _count_blocks(sizes, n_boot=n_boot, seed=seed):
        prod = (counts @ count_matrix).astype(np.float64)
        sums = counts.astype(np.float64) @ sum_matrix if sum_matrix is not None else None
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
    return {key: np.concatenate(chunks) for key, chunks in parts.items()}


def interval(boot: np.ndarray, *, ci: float = 0.95) -> tuple[float, float]:
    """Two-sided percentile interval of a bootstrap distribution (NaN resamples ignored)."""
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.quantile(boot, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    return float(lo), float(hi)


def paired_compare(
    base: Mapping[str, np.ndarray],
    cand: Mapping[str, np.ndarray],
    *,
    stats: Mapping[str, Sequence[str]],
    strata: np.ndarray | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    ci: float = 0.95,
) -> pd.DataFrame:
    """Paired comparison of a candidate with its baseline on the same requests.

    ``base[m]`` and ``cand[m]`` are aligned arrays (one entry per request, same order) of metric
    ``m``; only requests where both are finite count (``n_pairs``; ``n_excluded`` = the rest).
    One row per (metric, stat): ``base``, ``cand``, ``delta`` (cand - base, in the metric's unit)
    with ``delta_lo``/``delta_hi``, ``ratio`` (cand / base) with ``ratio_lo``/``ratio_hi``.
    """
    columns: dict[Hashable, np.ndarray] = {}
    col_stats: dict[Hashable, Sequence[str]] = {}
    for m, st in stats.items():
        b = np.asarray(base[m], dtype=float)
        c = np.asarray(cand[m], dtype=float)
        both = np.isfinite(b) & np.isfinite(c)
        columns[(m, "base")] = np.where(both, b, np.nan)
        columns[(m, "cand")] = np.where(both, c, np.nan)
        col_stats[(m, "base")] = col_stats[(m, "cand")] = st
    boots = bootstrap_distributions(columns, stats=col_stats, strata=strata, n_boot=n_boot, seed=seed)
    rows = []
    for m, st in stats.items():
        b, c = columns[(m, "base")], columns[(m, "cand")]
        n_pairs = int(np.isfinite(b).sum())
        for s in st:
            rows.append(
                _compare_row(
                    point_stat(b, s),
                    point_stat(c, s),
                    boots[((m, "base"), s)],
                    boots[((m, "cand"), s)],
                    ci=ci,
                )
                | {"metric": m, "stat": s, "n_pairs": n_pairs, "n_excluded": int(b.size - n_pairs)}
            )
    cols = [
        "metric",
        "stat",
        "base",
        "cand",
        "delta",
        "delta_lo",
        "delta_hi",
        "ratio",
        "ratio_lo",
        "ratio_hi",
    ]
    return pd.DataFrame(rows, columns=[*cols, "n_pairs", "n_excluded"])


def _compare_row(base: float, cand: float, bb: np.ndarray, cb: np.ndarray, *, ci: float) -> dict[str, Any]:
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = cand / base if base != 0 else float("nan")
        ratio_boot = np.where(bb != 0, cb / np.where(bb != 0, bb, 1), np.nan)
    d_lo, d_hi = interval(cb - bb, ci=ci)
    r_lo, r_hi = interval(ratio_boot, ci=ci)
    return {
        "base": base,
        "cand": cand,
        "delta": cand - base,
        "delta_lo": d_lo,
        "delta_hi": d_hi,
        "ratio": float(ratio),
        "ratio_lo": r_lo,
        "ratio_hi": r_hi,
    }


def verdict(
    *,
    delta: float,
    delta_lo: float,
    delta_hi: float,
    noise_floor: float | None,
    lower_is_better: bool = True,
) -> str:
    """``"not distinguishable"`` when the interval contains 0 or ``|delta|`` lies inside the A/A
    noise floor; otherwise ``"better"`` or ``"worse"``; ``"unknown"`` when the delta is NaN."""
    if not np.isfinite(delta) or not (np.isfinite(delta_lo) and np.isfinite(delta_hi)):
        return "unknown"
    if delta_lo <= 0 <= delta_hi:
        return "not distinguishable"
    if noise_floor is not None and np.isfinite(noise_floor) and abs(delta) <= noise_floor:
        return "not distinguishable"
    improved = delta < 0 if lower_is_better else delta > 0
    return "better" if improved else "worse"


def aa_noise_floor(
    baseline: pd.DataFrame,
    *,
    stats: Mapping[str, Sequence[str]],
    n_boot: int = 2000,
    seed: int = 0,
    ci: float = 0.95,
) -> pd.DataFrame:
    """A/A check over the baseline's repeats at one load: every pair of repeats is compared like a
    candidate with its baseline (paired on ``request_id``, all pairs on the same resamples).

    ``baseline`` holds one arm at one load: ``request_id``, ``repeat`` and the metric columns.
    One row per (metric, stat): ``n_repeat_pairs``; ``noise_floor`` (the largest |bound| of the
    repeat-vs-repeat difference intervals, in the metric's unit: a difference this size shows up
    between identical configurations); ``noise_floor_rel`` (the largest |ratio bound - 1|);
    ``max_abs_delta``; ``aa_pass`` (every repeat-pair interval contains 0). With fewer than two
    repeats the floors are NaN and ``aa_pass`` is None.
    """
    repeats = sorted(baseline["repeat"].unique())
    pairs = list(itertools.combinations(repeats, 2))
    dedup = baseline.drop_duplicates(["request_id", "repeat"])
    universe = pd.Index(dedup["request_id"].unique())
    by_repeat = {r: dedup[dedup["repeat"] == r].set_index("request_id").reindex(universe) for r in repeats}
    columns: dict[Hashable, np.ndarray] = {}
    col_stats: dict[Hashable, Sequence[str]] = {}
    for pair in pairs:
        for m, st in stats.items():
            a = by_repeat[pair[0]][m].to_numpy(dtype=float)
            b = by_repeat[pair[1]][m].to_numpy(dtype=float)
            both = np.isfinite(a) & np.isfinite(b)
            columns[(pair, m, "a")] = np.where(both, a, np.nan)
            columns[(pair, m, "b")] = np.where(both, b, np.nan)
            col_stats[(pair, m, "a")] = col_stats[(pair, m, "b")] = st
    boots = bootstrap_distributions(columns, stats=col_stats, n_boot=n_boot, seed=seed) if pairs else {}
    rows = []
    for m, st in stats.items():
        for s in st:
            if not pairs:
                rows.append(
                    {
                        "metric": m,
                        "stat": s,
                        "n_repeat_pairs": 0,
                        "noise_floor": np.nan,
                        "noise_floor_rel": np.nan,
                    }
                    | {"max_abs_delta": np.nan, "aa_pass": None}
                )
                continue
            res = [
                _compare_row(
                    point_stat(columns[(pair, m, "a")], s),
                    point_stat(columns[(pair, m, "b")], s),
                    boots[((pair, m, "a"), s)],
                    boots[((pair, m, "b"), s)],
                    ci=ci,
                )
                for pair in pairs
            ]
            bounds = np.array([[r["delta_lo"], r["delta_hi"]] for r in res], dtype=float)
            rel = np.abs(np.array([[r["ratio_lo"], r["ratio_hi"]] for r in res], dtype=float) - 1)
            deltas = np.abs(np.array([r["delta"] for r in res], dtype=float))
            rows.append(
                {
                    "metric": m,
                    "stat": s,
                    "n_repeat_pairs": len(pairs),
                    "noise_floor": float(np.nanmax(np.abs(bounds))) if np.isfinite(bounds).any() else np.nan,
                    "noise_floor_rel": float(np.nanmax(rel)) if np.isfinite(rel).any() else np.nan,
                    "max_abs_delta": float(np.nanmax(deltas)) if np.isfinite(deltas).any() else np.nan,
                    "aa_pass": bool(((bounds[:, 0] <= 0) & (bounds[:, 1] >= 0)).all()),
                }
            )
    return pd.DataFrame(rows)


def run_spread(
    per_run: pd.DataFrame, *, columns: Sequence[str], by: Sequence[str] = ("arm", "load")
) -> pd.DataFrame:
    """Run-to-run spread across repeats: one row per group and column with ``n_runs``, ``mean``,
    ``std`` (sample, ddof=1; NaN for one run), ``min``, ``max`` (in the column's unit)."""
    long = per_run.melt(id_vars=list(by), value_vars=list(columns), var_name="metric", value_name="value")
    out = (
        long.groupby([*by, "metric"], sort=True)["value"]
        .agg(n_runs="count", mean="mean", std="std", min="min", max="max")
        .reset_index()
    )
    return out


def knee_find(ks: Sequence[int], gains: Sequence[float], widths: Sequence[float]) -> dict[str, object]:
    """Knee of a draft-length sweep.

    ``ks`` sorted draft lengths; ``gains[i]`` the improvement (seconds, positive = faster) going
    from ``ks[i]`` to ``ks[i + 1]`` and ``widths[i]`` the full width (hi - lo) of its interval. The
    knee is the first ``ks[i]`` whose next step gains less than that width: the added proposals no
    longer pay by more than the measurement can resolve. ``reached`` is False when every step
    pays (knee = the largest k tested).
    """
    for i, (gain, width) in enumerate(zip(gains, widths, strict=True)):
        if not (np.isfinite(gain) and np.isfinite(width)) or gain < width:
            return {"knee_k": int(ks[i]), "reached": True}
    return {"knee_k": int(ks[-1]) if len(ks) else None, "reached": False}


# --------------------------------------------------------------------------------------------
# The entry point the comparison page, the JSON export and the decision gate call.
# --------------------------------------------------------------------------------------------

# Paired headline comparisons: metric -> statistics with intervals.
HEADLINE_STATS: dict[str, tuple[str, ...]] = {
    "ttft_s": ("mean", "p50", "p95", "p99"),
    "tpot_s": ("mean", "p50", "p95"),
    "e2e_s": ("mean", "p50", "p95", "p99"),
    "itl_chunk_mean_s": ("mean", "p95"),
    "met_deadline": ("mean",),
    "success": ("mean",),
}
HIGHER_IS_BETTER: frozenset[str] = frozenset({"met_deadline", "success"})
# Paired slice comparisons with intervals, per slice dimension: metric -> statistics. The traffic
# class (the class a release promises a latency benefit to) gets the latency percentiles; the
# other dimensions get means only, which cost no order statistics.
SLICE_INTERVALS: dict[str, dict[str, tuple[str, ...]]] = {
    "traffic_class": {
        "ttft_s": ("mean", "p50", "p95"),
        "tpot_s": ("mean", "p50", "p95"),
        "e2e_s": ("mean", "p50", "p95"),
        "success": ("mean",),
    },
    "task": {"tpot_s": ("mean",), "e2e_s": ("mean",), "success": ("mean",)},
    "prompt_bucket": {"tpot_s": ("mean",), "success": ("mean",)},
    "output_bucket": {"tpot_s": ("mean",), "success": ("mean",)},
}
# Per-slice point estimates copied into each slice row, with a delta against the baseline.
SLICE_POINT_COLUMNS: tuple[str, ...] = (
    "ttft_s_p95",
    "tpot_s_p50",
    "tpot_s_p95",
    "e2e_s_p95",
    "e2e_s_p99",
    "goodput_rps",
    "deadline_attainment",
)
RUN_SPREAD_COLUMNS: tuple[str, ...] = (
    "ttft_s_p95",
    "tpot_s_p50",
    "tpot_s_p95",
    "e2e_s_p95",
    "e2e_s_p99",
    "itl_chunk_s_p95",
    "completed_rps",
    "goodput_rps",
    "output_tokens_per_s",
    "acceptance_rate",
    "peak_memory_bytes",
    "cost_per_success_usd",
)
KNEE_METRIC, KNEE_STAT = "tpot_s", "p50"
SCHEMA_VERSION = 1


def _json_safe(value: object) -> object:
    """NaN, inf and numpy scalars to JSON: non-finite floats become None."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_json_safe(v) for v in value.tolist()]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, np.str_):
        return str(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if np.isfinite(value) else None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def _records(frame: pd.DataFrame) -> list[dict]:
    """Rows as JSON-safe dicts, converted a column at a time."""
    columns: dict[str, list] = {}
    for name in frame.columns:
        col = frame[name]
        if isinstance(col.dtype, np.dtype) and col.dtype.kind == "f":
            arr = col.to_numpy()
            values = arr.astype(object)
            values[~np.isfinite(arr)] = None
            columns[str(name)] = values.tolist()
        else:
            columns[str(name)] = [_json_safe(v) for v in col.astype(object).tolist()]
    names = list(columns)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def _resolve_baseline(requests: pd.DataFrame, baseline_arm: str | None) -> str:
    if baseline_arm is not None:
        if not (requests["arm"] == baseline_arm).any():
            raise ValueError(f"baseline arm {baseline_arm!r} has no requests")
        return baseline_arm
    arms = requests.loc[requests["is_baseline"].astype(bool), "arm"].unique()
    if len(arms) != 1:
        raise ValueError(f"expected exactly one baseline arm, found {list(arms)}")
    return str(arms[0])


def _align(frame: pd.DataFrame, universe: pd.MultiIndex, columns: Sequence[str]) -> pd.DataFrame:
    slim = frame[["request_id", "repeat", *columns]]
    dedup = slim.drop_duplicates(["request_id", "repeat"]).set_index(["request_id", "repeat"])
    return dedup.reindex(universe)


def _cost_rows(costs: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    grouped = costs.groupby(list(by), sort=True)
    out = grouped.agg(
        accelerator_hours=("accelerator_hours", "sum"),
        cost_usd=("cost_usd", "sum"),
        successes=("successes", "sum"),
        cost_output_tokens=("cost_output_tokens", "sum"),
        peak_memory_bytes=("peak_memory_bytes", "max"),
        mean_util=("mean_util", "mean"),
        energy_cost_included=("energy_cost_included", "all"),
    )
    # Energy only when every run measured it: a partial sum would understate it.
    out["energy_j"] = (
        grouped["energy_j"].sum(min_count=1).where(grouped["energy_j"].count() == grouped.size())
    )
    return out.reset_index()


def _cost_columns(rows: pd.DataFrame) -> pd.DataFrame:
    from console.analysis.metrics import cost_per_success

    extra = [
        cost_per_success(c, int(s), int(t))
        for c, s, t in zip(rows["cost_usd"], rows["successes"], rows["cost_output_tokens"], strict=True)
    ]
    cols = [
        "cost_per_success_usd",
        "cost_per_success_reason",
        "cost_per_million_output_tokens_usd",
        "cost_per_million_output_tokens_reason",
    ]
    rows = rows.copy()
    for c in cols:
        rows[c] = [e[c] for e in extra]
    return rows


def comparison_compute(
    requests: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    deadlines: Mapping[str, Mapping[str, float]] | None,
    cost_per_hour_usd: float,
    power_price_usd_per_kwh: float | None = None,
    baseline_arm: str | None = None,
    sweeps: Mapping[str, Mapping[str, int]] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    max_regressions: int = 1000,
) -> dict:
    """Everything the comparison page and the decision gate need, as a JSON-serialisable dict.

    ``requests`` and ``runs`` follow the contract in ``console.analysis.metrics``. ``deadlines``
    per traffic class (seconds); ``cost_per_hour_usd`` per accelerator-hour;
    ``power_price_usd_per_kwh`` optional; ``baseline_arm`` defaults to the ``is_baseline`` arm;
    ``sweeps`` maps a sweep name to ``{arm: draft length k}`` (the baseline joins every sweep as
    k = 0). Bootstrap: ``n_boot`` resamples, ``seed``, two-sided level ``ci``.

    Schema (version 1); every float is in the unit its name says (``_s`` seconds, ``_usd`` USD,
    ``_bytes`` bytes, ``_j`` joules, ``_rps`` requests/s, ``_per_s`` tokens/s), NaN/inf as null:

    - ``schema_version``, ``baseline_arm``, ``params`` (the arguments above), ``notes`` (list[str]).
    - ``headline``: one row per arm x load: ``arm``, ``load``, ``is_baseline``, counts
      (``n_runs``, ``n_requests``, ``n_completed``, ``n_failed``, ``n_met_deadline``, ``wall_s``,
      ``output_tokens``), ``{metric}_{stat}`` for metric in ttft_s, ttft_from_send_s, tpot_s, e2e_s,
      queue_s, itl_chunk_mean_s (per request), itl_chunk_s, itl_token_s (pooled gaps) and stat in
      p50/p90/p95/p99/mean; ``completed_rps``, ``goodput_rps``, ``output_tokens_per_s``,
      ``deadline_attainment``; ``steps``, ``drafted``, ``accepted``, ``acceptance_rate``,
      ``accepted_per_pass``; ``accelerator_hours``, ``cost_usd``, ``successes``, ``success_mean`` (fraction),
      ``peak_memory_bytes`` (max over runs), ``mean_util``, ``energy_j`` (null unless every run
      measured it), ``energy_cost_included``, ``cost_per_success_usd`` (+ ``_reason``, set when it
      is null), ``cost_per_million_output_tokens_usd`` (+ ``_reason``); quality rates
      (``json_valid_rate``, ``schema_valid_rate``, ``tool_valid_rate``, ``exact_match_rate``,
      ``output_valid_rate`` with ``n_<check>``), ``n_regressions`` (requests); and ``deltas`` (candidates only):
      list of ``{metric, stat, base, cand, delta, delta_lo, delta_hi, ratio, ratio_lo, ratio_hi,
      n_pairs, n_excluded, noise_floor, verdict}`` for ``HEADLINE_STATS``; ``verdict`` is
      "better", "worse", "not distinguishable" or "unknown".
    - ``runs``: one row per run: the headline's metric columns for that run plus ``run_id``,
      ``repeat``, resources and cost.
    - ``spread``: run-to-run spread per arm x load x metric: ``n_runs``, ``mean``, ``std``,
      ``min``, ``max``.
    - ``slices``: one row per dimension x value x arm x load: ``dimension``, ``value``, the
      aggregate columns as in ``headline`` (no pooled gaps), acceptance, quality rates,
      ``<col>_delta`` (candidate - baseline point estimate) for ``SLICE_POINT_COLUMNS``, and
      ``success_mean`` (fraction of the slice's requests that succeeded), and paired intervals
      ``<metric>_<stat>_delta``/``_delta_lo``/``_delta_hi`` for the metrics and statistics
      ``SLICE_INTERVALS`` lists for that dimension (over requests defined in both arms; the
      paired delta overrides the point delta of the same name).
    - ``acceptance``: ``by_task``, ``by_traffic_class`` (arm x load x key), ``by_position``
      (arm x load x draft position j: ``proposed``, ``accepted``, ``rate``),
      ``by_output_position`` (arm x load x ``position_bucket``), ``by_task_output_position``.
    - ``quality``: ``regressions`` (up to ``max_regressions`` rows: ``arm``, ``load``,
      ``request_id``, ``repeat``, ``task``, ``traffic_class``, ``checks``, ``baseline_run_id``,
      ``candidate_run_id``, [``baseline_result_id``, ``candidate_result_id``], ``reason``),
      ``n_regressions`` (total requests), ``truncated`` (bool), ``divergence`` (arm x load:
      ``n_compared``, ``n_diverged``, ``first_divergence_p50`` tokens).
    - ``noise_floor``: per load x metric x stat: ``n_repeat_pairs``, ``noise_floor``,
      ``noise_floor_rel``, ``max_abs_delta``, ``aa_pass``.
    - ``knees``: per sweep x load x slice (``dimension``/``value`` null = all requests):
      ``points`` [{``arm``, ``k``, ``tpot_s_p50``}], ``steps`` [{``from_k``, ``to_k``,
      ``gain_s``, ``gain_lo``, ``gain_hi``}], ``knee_k``, ``reached`` (see :func:`knee_find`). A
      step's gain is TPOT p50 at the smaller k minus at the larger k (seconds, positive = faster),
      each arm over its own requests with a TPOT, all on the same resamples.
    """
    from console.analysis.metrics import (
        acceptance_aggregate,
        acceptance_by_position,
        chunk_times_flatten,
        gaps_flatten,
        group_codes,
        metrics_aggregate,
        request_success,
        requests_derive,
        run_costs,
        steps_flatten,
        steps_per_request,
    )
    from console.analysis.quality import (
        STORED_COLUMNS,
        exact_match,
        quality_flags,
        quality_rates,
        quality_regressions,
    )
    from console.analysis.slices import SLICE_DIMENSIONS, slices_assign

    notes: list[str] = []
    base_arm = _resolve_baseline(requests, baseline_arm)
    # Rows grouped by arm, load and run: every grouping below then finds its rows contiguous.
    req = requests.sort_values(["arm", "load", "repeat", "run_id"], kind="stable").reset_index(drop=True)
    chunk_flat = chunk_times_flatten(req)
    derived = requests_derive(req, deadlines=deadlines, chunk_times_flat=chunk_flat)
    derived = slices_assign(derived, baseline_arm=base_arm)
    flags = quality_flags(derived)
    stored = [c for names in STORED_COLUMNS.values() for c in names]
    derived = derived.drop(columns=[*stored, "output_valid", "quality_reason"], errors="ignore")
    derived = pd.concat([derived, flags, exact_match(derived, baseline_arm=base_arm)], axis=1)
    derived["success"] = request_success(derived).astype(float)
    derived["met_deadline_f"] = derived["met_deadline"].astype(float)
    gaps = gaps_flatten(derived, chunk_times_flat=chunk_flat)
    del chunk_flat
    steps = steps_flatten(derived)
    request_steps = steps_per_request(steps, n_rows=len(derived))
    # The list and text columns are flattened or checked now; dropping them keeps the many
    # frame copies below cheap.
    heavy = ["chunk_times", "chunk_tokens", "output_token_ids", "output_text", "drafted", "accepted"]
    derived = derived.drop(columns=[*heavy, "response_format", "tools"], errors="ignore")
    runs = runs.copy()
    for col, default in (("accelerator_count", 1), ("energy_j", np.nan), ("mean_util", np.nan)):
        if col not in runs:
            runs[col] = default
    costs = run_costs(
        runs, derived, cost_per_hour_usd=cost_per_hour_usd, power_price_usd_per_kwh=power_price_usd_per_kwh
    )
    costs = costs.rename(columns={"output_tokens": "cost_output_tokens"}).drop(columns=["n_requests"])

    def with_extras(agg: pd.DataFrame, by: list[str]) -> pd.DataFrame:
        acc = acceptance_aggregate(request_steps, derived, by=by)
        qual = quality_rates(derived, by=by)
        codes, success = group_codes(derived, by)
        success["success_mean"] = np.bincount(codes, weights=derived["success"].to_numpy()) / np.bincount(
            codes
        )
        out = agg.merge(acc, on=by, how="left").merge(qual.drop(columns=["n_requests"]), on=by, how="left")
        out = out.merge(success, on=by, how="left")
        for col in ("steps", "drafted", "accepted"):
            out[col] = out[col].fillna(0).astype(np.int64)
        return out

    # Per run.
    run_by = ["arm", "load", "repeat", "run_id"]
    per_run = with_extras(metrics_aggregate(derived, runs, by=run_by, gaps=gaps), run_by)
    per_run = per_run.drop(columns=["wall_s"]).merge(
        costs.drop(columns=["arm", "load", "repeat"], errors="ignore"), on="run_id", how="left"
    )
    per_run = _cost_columns(per_run).drop(columns=["cost_output_tokens"])
    run_keys = derived.drop_duplicates("run_id").set_index("run_id")[["arm", "load", "repeat"]]

    # Per arm x load.
    headline = with_extras(metrics_aggregate(derived, runs, by=["arm", "load"], gaps=gaps), ["arm", "load"])
    cost_by_run = costs.drop(columns=["arm", "load", "repeat"], errors="ignore").merge(
        run_keys.reset_index(), on="run_id"
    )
    headline = _cost_columns(
        headline.merge(_cost_rows(cost_by_run, ["arm", "load"]), on=["arm", "load"], how="left")
    )
    headline["is_baseline"] = headline["arm"] == base_arm
    headline = headline.drop(columns=["cost_output_tokens"])

    regressions = quality_regressions(derived, baseline_arm=base_arm)
    n_reg = regressions.groupby(["arm", "load"]).size().rename("n_regressions").reset_index()
    headline = headline.merge(n_reg, on=["arm", "load"], how="left")
    headline["n_regressions"] = headline["n_regressions"].fillna(0).astype(np.int64)

    spread = run_spread(per_run, columns=[c for c in RUN_SPREAD_COLUMNS if c in per_run], by=("arm", "load"))

    # Noise floor (A/A) per load.
    metric_cols = {m: ("met_deadline_f" if m == "met_deadline" else m) for m in HEADLINE_STATS}
    noise_rows = []
    floors: dict[tuple[str, str, str], float] = {}
    loads = list(pd.unique(derived["load"]))
    for li, load in enumerate(loads):
        base_rows = derived[(derived["arm"] == base_arm) & (derived["load"] == load)]
        frame = base_rows[["request_id", "repeat"]].copy()
        for m, col in metric_cols.items():
            frame[m] = base_rows[col].to_numpy(dtype=float)
        aa = aa_noise_floor(frame, stats=HEADLINE_STATS, n_boot=n_boot, seed=seed + 7919 * (li + 1), ci=ci)
        aa.insert(0, "load", load)
        noise_rows.append(aa)
        for r in aa.itertuples():
            floors[(load, r.metric, r.stat)] = r.noise_floor
    noise = pd.concat(noise_rows, ignore_index=True) if noise_rows else pd.DataFrame()
    if not noise.empty and (noise["n_repeat_pairs"] == 0).all():
        notes.append("noise floor unavailable: the baseline needs at least two repeats at a load")

    # Paired comparisons per load, every candidate and slice on the same resamples.
    slice_frames = {
        dim: with_extras(metrics_aggregate(derived, runs, by=["arm", "load", dim]), ["arm", "load", dim])
        for dim in SLICE_DIMENSIONS
    }
    deltas: dict[tuple[str, str], list[dict]] = {}
    slice_intervals: dict[tuple[str, str, str, object], dict[str, float]] = {}
    knee_rows: list[dict] = []
    sweeps = dict(sweeps or {})
    for li, load in enumerate(loads):
        at_load = derived[derived["load"] == load]
        base_rows = at_load[at_load["arm"] == base_arm]
        if base_rows.empty:
            notes.append(f"load {load}: no baseline rows, no paired comparison")
            continue
        universe = pd.MultiIndex.from_frame(base_rows[["request_id", "repeat"]].drop_duplicates())
        slice_metrics = {m for spec in SLICE_INTERVALS.values() for m in spec}
        needed = sorted({*metric_cols.values(), *slice_metrics, KNEE_METRIC, *SLICE_DIMENSIONS})
        base_al = _align(base_rows, universe, needed)
        strata = universe.get_level_values("repeat").to_numpy()
        columns: dict[Hashable, np.ndarray] = {}
        col_stats: dict[Hashable, Sequence[str]] = {}
        cand_arms = [a for a in pd.unique(at_load["arm"]) if a != base_arm]
        aligned = {a: _align(at_load[at_load["arm"] == a], universe, needed) for a in cand_arms}
        aligned[base_arm] = base_al
        for arm in cand_arms:
            cand_al = aligned[arm]
            for m, st in HEADLINE_STATS.items():
                b = base_al[metric_cols[m]].to_numpy(dtype=float)
                c = cand_al[metric_cols[m]].to_numpy(dtype=float)
                both = np.isfinite(b) & np.isfinite(c)
                columns[(arm, m, "base")] = np.where(both, b, np.nan)
                columns[(arm, m, "cand")] = np.where(both, c, np.nan)
                col_stats[(arm, m, "base")] = col_stats[(arm, m, "cand")] = st
            for dim in SLICE_DIMENSIONS:
                dim_values = base_al[dim].to_numpy()
                for value in pd.unique(dim_values[pd.notna(dim_values)]):
                    in_slice = dim_values == value
                    for m, m_stats in SLICE_INTERVALS.get(dim, {}).items():
                        b = base_al[m].to_numpy(dtype=float)
                        c = cand_al[m].to_numpy(dtype=float)
                        both = np.isfinite(b) & np.isfinite(c) & in_slice
                        columns[(arm, m, "base", dim, value)] = np.where(both, b, np.nan)
                        columns[(arm, m, "cand", dim, value)] = np.where(both, c, np.nan)
                        col_stats[(arm, m, "base", dim, value)] = col_stats[(arm, m, "cand", dim, value)] = (
                            m_stats
                        )
        knee_specs = []
        for name, arm_ks in sweeps.items():
            points = sorted(((int(k), a) for a, k in arm_ks.items() if a in aligned), key=lambda t: t[0])
            if base_arm not in arm_ks:
                points = [(0, base_arm), *points]
            if len(points) < 2:
                continue
            slice_defs: list[tuple[str | None, object]] = [(None, None)]
            for dim in SLICE_DIMENSIONS:
                vals = base_al[dim].to_numpy()
                slice_defs += [(dim, v) for v in pd.unique(vals[pd.notna(vals)])]
            for sdim, svalue in slice_defs:
                mask = (
                    np.ones(len(universe), dtype=bool)
                    if sdim is None
                    else (base_al[sdim].to_numpy() == svalue)
                )
                for _, arm in points:
                    kkey = ("knee", arm, sdim, svalue)
                    if kkey not in columns:
                        v = aligned[arm][KNEE_METRIC].to_numpy(dtype=float)
                        columns[kkey] = np.where(mask, v, np.nan)
                        col_stats[kkey] = (KNEE_STAT,)
                knee_specs.append((name, points, sdim, svalue))
        boots = bootstrap_distributions(
            columns, stats=col_stats, strata=strata, n_boot=n_boot, seed=seed + 104729 * (li + 1)
        )
        for arm in cand_arms:
            rows = []
            for m, st in HEADLINE_STATS.items():
                b, c = columns[(arm, m, "base")], columns[(arm, m, "cand")]
                n_pairs = int(np.isfinite(b).sum())
                for s in st:
                    row = _compare_row(
                        point_stat(b, s),
                        point_stat(c, s),
                        boots[((arm, m, "base"), s)],
                        boots[((arm, m, "cand"), s)],
                        ci=ci,
                    )
                    floor = floors.get((load, m, s))
                    floor = None if floor is None or not np.isfinite(floor) else float(floor)
                    row |= {
                        "metric": m,
                        "stat": s,
                        "n_pairs": n_pairs,
                        "n_excluded": int(b.size - n_pairs),
                        "noise_floor": floor,
                        "verdict": verdict(
                            delta=row["delta"],
                            delta_lo=row["delta_lo"],
                            delta_hi=row["delta_hi"],
                            noise_floor=floor,
                            lower_is_better=m not in HIGHER_IS_BETTER,
                        ),
                    }
                    rows.append(row)
            deltas[(arm, load)] = rows
            slice_keys = [
                ck
                for ck in columns
                if isinstance(ck, tuple) and len(ck) == 5 and ck[0] == arm and ck[2] == "cand"
            ]
            for ckey in slice_keys:
                _, sm, _, sdim, svalue = ckey
                bkey = (arm, sm, "base", sdim, svalue)
                for sstat in col_stats[ckey]:
                    res = _compare_row(
                        point_stat(columns[bkey], sstat),
                        point_stat(columns[ckey], sstat),
                        boots[(bkey, sstat)],
                        boots[(ckey, sstat)],
                        ci=ci,
                    )
                    slice_intervals.setdefault((arm, load, sdim, svalue), {}).update(
                        {
                            f"{sm}_{sstat}_delta": res["delta"],
                            f"{sm}_{sstat}_delta_lo": res["delta_lo"],
                            f"{sm}_{sstat}_delta_hi": res["delta_hi"],
                        }
                    )
        for name, points, kdim, kvalue in knee_specs:
            pts: list[dict[str, Any]] = []
            step_rows: list[dict[str, Any]] = []
            gains: list[float] = []
            widths: list[float] = []
            for k, arm in points:
                kcol = columns[("knee", arm, kdim, kvalue)]
                pts.append({"arm": arm, "k": k, f"{KNEE_METRIC}_{KNEE_STAT}": point_stat(kcol, KNEE_STAT)})
            for (k0, a0), (k1, a1) in itertools.pairwise(points):
                g_boot = (
                    boots[(("knee", a0, kdim, kvalue), KNEE_STAT)]
                    - boots[(("knee", a1, kdim, kvalue), KNEE_STAT)]
                )
                gain = (
                    pts[[p["arm"] for p in pts].index(a0)][f"{KNEE_METRIC}_{KNEE_STAT}"]
                    - pts[[p["arm"] for p in pts].index(a1)][f"{KNEE_METRIC}_{KNEE_STAT}"]
                )
                lo, hi = interval(g_boot, ci=ci)
                step_rows.append({"from_k": k0, "to_k": k1, "gain_s": gain, "gain_lo": lo, "gain_hi": hi})
                gains.append(gain)
                widths.append(hi - lo)
            knee = knee_find([k for k, _ in points], gains, widths)
            knee_rows.append(
                {
                    "sweep": name,
                    "load": load,
                    "dimension": kdim,
                    "value": kvalue,
                    "points": pts,
                    "steps": step_rows,
                }
                | knee
            )

    # Slice rows with deltas against the baseline's slice.
    slice_rows = []
    for dim, frame in slice_frames.items():
        frame = frame.rename(columns={dim: "value"})
        frame.insert(0, "dimension", dim)
        base = frame[frame["arm"] == base_arm].set_index(["load", "value"])
        idx = pd.MultiIndex.from_frame(frame[["load", "value"]])
        for col in SLICE_POINT_COLUMNS:
            frame[f"{col}_delta"] = frame[col].to_numpy() - base[col].reindex(idx).to_numpy()
        extra = pd.DataFrame(
            [
                slice_intervals.get((a, lo, dim, v), {})
                for a, lo, v in zip(frame["arm"], frame["load"], frame["value"], strict=True)
            ],
            index=frame.index,
        )
        for col in extra.columns:
            # A paired interval's own delta replaces the unpaired point delta of the same name.
            frame[col] = extra[col].where(extra[col].notna(), frame[col]) if col in frame else extra[col]
        slice_rows.append(frame)
    slices_out = pd.concat(slice_rows, ignore_index=True) if slice_rows else pd.DataFrame()

    # Acceptance tables.
    acceptance = {
        "by_task": _records(acceptance_aggregate(request_steps, derived, by=["arm", "load", "task"])),
        "by_traffic_class": _records(
            acceptance_aggregate(request_steps, derived, by=["arm", "load", "traffic_class"])
        ),
        "by_position": _records(acceptance_by_position(steps, derived, by=["arm", "load"])),
        "by_task_position": _records(acceptance_by_position(steps, derived, by=["arm", "load", "task"])),
        "by_output_position": _records(
            acceptance_aggregate(steps, derived, by=["arm", "load", "position_bucket"])
        ),
        "by_task_output_position": _records(
            acceptance_aggregate(steps, derived, by=["arm", "load", "task", "position_bucket"])
        ),
    }

    # Quality: regressions and divergence.
    cands = derived[derived["arm"] != base_arm]
    compared = cands[cands["exact_match"].notna()]
    divergence = (
        compared.assign(diverged=~compared["exact_match"].astype(bool))
        .groupby(["arm", "load"])
        .agg(
            n_compared=("diverged", "size"),
            n_diverged=("diverged", "sum"),
            first_divergence_p50=(
                "first_divergence",
                lambda s: float(s.dropna().median()) if s.notna().any() else np.nan,
            ),
        )
        .reset_index()
    )

    headline_rows = _records(headline)
    for hrow in headline_rows:
        hrow["deltas"] = _json_safe(deltas.get((hrow["arm"], hrow["load"]), []))
    summary = {
        "schema_version": SCHEMA_VERSION,
        "baseline_arm": str(base_arm),
        "params": _json_safe(
            {
                "deadlines": deadlines,
                "cost_per_hour_usd": cost_per_hour_usd,
                "power_price_usd_per_kwh": power_price_usd_per_kwh,
                "sweeps": sweeps,
                "n_boot": n_boot,
                "seed": seed,
                "ci": ci,
            }
        ),
        "headline": headline_rows,
        "runs": _records(per_run),
        "spread": _records(spread),
        "slices": _records(slices_out),
        "acceptance": acceptance,
        "quality": {
            "regressions": _records(regressions.head(max_regressions)),
            "n_regressions": len(regressions),
            "truncated": len(regressions) > max_regressions,
            "divergence": _records(divergence),
        },
        "noise_floor": _records(noise),
        "knees": _json_safe(knee_rows),
        "notes": notes,
    }
    # Every part is JSON-safe already (_records and _json_safe above).
    return summary
