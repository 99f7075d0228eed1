"""The A/A noise floor and the baseline's stability, from the baseline's own repeats.

The floor of a statistic at a load (and slice) is the largest absolute **point** difference of
that statistic between two repeats of the baseline on the same requests: a difference this size
shows up between identical configurations on this host. It is a practical margin, not an
interval: a candidate's difference counts only when its interval clears zero *and* its point
estimate exceeds the floor. More repeats estimate it better; they do not inflate it the way the
largest interval bound over repeat pairs did. With one repeat there is no floor (None), and
nothing that needs one is measured.

Stability: every pair of repeats is also compared like a candidate with its baseline (paired,
request-clustered bootstrap, the same intervals); Holm over every pair, load and gate metric.
A significant pair flags the experiment: "baseline unstable: rerun on a quieter host".
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence

import numpy as np
import pandas as pd

from console.analysis.comparison.bootstrap import bootstrap_distributions, point_stat
from console.analysis.comparison.intervals import holm_adjust, paired_delta
from console.analysis.comparison.rows import BaselineStability, NoiseFloorRow, StabilityTest

UNSTABLE_MESSAGE = "baseline unstable: its repeats differ significantly among themselves; rerun on a quieter host"


def _floor_from_matrix(m: np.ndarray, stat: str) -> tuple[int, int, float | None, float | None]:
    """(repeats, pairs, floor, relative floor) of ``stat`` over a requests x repeats matrix."""
    repeats = m.shape[1]
    pairs = list(itertools.combinations(range(repeats), 2))
    if not pairs:
        return repeats, 0, None, None
    diffs = []
    for a, b in pairs:
        both = np.isfinite(m[:, a]) & np.isfinite(m[:, b])
        if both.any():
            diffs.append(abs(point_stat(m[both, b], stat) - point_stat(m[both, a], stat)))
    diffs = [d for d in diffs if np.isfinite(d)]
    if not diffs:
        return repeats, len(pairs), None, None
    floor = float(max(diffs))
    pooled = point_stat(m.ravel(), stat)
    rel = floor / abs(pooled) if np.isfinite(pooled) and pooled != 0 else None
    return repeats, len(pairs), floor, rel


def _matrices(frame: pd.DataFrame, metrics: Sequence[str]) -> dict[str, np.ndarray]:
    """requests x repeats matrices of each metric (NaN where a request lacks a repeat)."""
    dedup = frame.drop_duplicates(["request_id", "repeat"])
    rows, _ = pd.factorize(dedup["request_id"])
    cols, _ = pd.factorize(dedup["repeat"], sort=True)
    n, r = (rows.max() + 1 if rows.size else 0), (cols.max() + 1 if cols.size else 0)
    out = {}
    for metric in metrics:
        m = np.full((n, r), np.nan)
        m[rows, cols] = dedup[metric].to_numpy(dtype=float)
        out[metric] = m
    return out


def noise_floors(
    baseline: pd.DataFrame,
    *,
    stats: Mapping[str, Sequence[str]],
    slice_dimensions: Sequence[str] = (),
) -> list[NoiseFloorRow]:
    """Floors per load x (all requests, and each value of each ``slice_dimensions``) x metric x
    stat over the baseline's rows (``load``, ``request_id``, ``repeat``, the metrics, the
    dimensions)."""
    rows: list[NoiseFloorRow] = []
    for load, at_load in baseline.groupby("load", sort=False):
        groups: list[tuple[str | None, object, pd.DataFrame]] = [(None, None, at_load)]
        for dim in slice_dimensions:
            for value, g in at_load.groupby(dim, sort=True):
                groups.append((dim, value, g))
        for gdim, value, g in groups:
            matrices = _matrices(g, list(stats))
            for metric, metric_stats in stats.items():
                for stat in metric_stats:
                    n_rep, n_pairs, floor, rel = _floor_from_matrix(matrices[metric], stat)
                    rows.append(
                        {
                            "load": str(load),
                            "dimension": gdim,
                            "value": value,
                            "metric": metric,
                            "stat": stat,
                            "n_repeats": n_rep,
                            "n_repeat_pairs": n_pairs,
                            "noise_floor": floor,
                            "noise_floor_rel": rel,
                            "p_value_min": None,
                        }
                    )
    return rows


def baseline_stability(
    baseline: pd.DataFrame,
    *,
    stats: Mapping[str, Sequence[str]],
    alpha: float = 0.05,
    n_boot: int,
    seed: int,
    ci: float = 0.95,
) -> BaselineStability:
    """Repeat-vs-repeat paired comparisons of the baseline per load (see module docstring).

    ``baseline`` holds the baseline's rows: ``load``, ``request_id``, ``repeat`` and the metric
    columns. ``stable`` is None when no load has two repeats."""
    tests: list[StabilityTest] = []
    for li, (load, at_load) in enumerate(baseline.groupby("load", sort=False)):
        dedup = at_load.drop_duplicates(["request_id", "repeat"])
        repeats = sorted(int(r) for r in dedup["repeat"].unique())
        if len(repeats) < 2:
            continue
        universe = pd.Index(dedup["request_id"].unique())
        wide = {r: dedup[dedup["repeat"] == r].set_index("request_id").reindex(universe) for r in repeats}
        pairs = list(itertools.combinations(repeats, 2))
        columns: dict[Hashable, np.ndarray] = {}
        col_stats: dict[Hashable, Sequence[str]] = {}
        for a, b in pairs:
            for metric, metric_stats in stats.items():
                va = wide[a][metric].to_numpy(dtype=float)
                vb = wide[b][metric].to_numpy(dtype=float)
                both = np.isfinite(va) & np.isfinite(vb)
                columns[(a, b, metric, "a")] = np.where(both, va, np.nan)
                columns[(a, b, metric, "b")] = np.where(both, vb, np.nan)
                col_stats[(a, b, metric, "a")] = col_stats[(a, b, metric, "b")] = metric_stats
        # One row per request (the universe): each replicate draws requests, every repeat of a
        # drawn request comes along.
        boots = bootstrap_distributions(columns, stats=col_stats, n_boot=n_boot, seed=seed + 15485863 * (li + 1))
        for a, b in pairs:
            for metric, metric_stats in stats.items():
                ca, cb = columns[(a, b, metric, "a")], columns[(a, b, metric, "b")]
                for stat in metric_stats:
                    row = paired_delta(
                        stat=stat,
                        base_point=point_stat(ca, stat),
                        cand_point=point_stat(cb, stat),
                        base_boot=boots[((a, b, metric, "a"), stat)],
                        cand_boot=boots[((a, b, metric, "b"), stat)],
                        n_requests=int(np.isfinite(ca).sum()),
                        ci=ci,
                    )
                    tests.append(
                        {
                            "load": str(load),
                            "metric": metric,
                            "stat": stat,
                            "repeats": [a, b],
                            "delta": _finite_or_none(row["delta"]),
                            "p_value": _finite_or_none(row["p_value"]),
                            "p_holm": None,
                        }
                    )
    if not tests:
        return {"stable": None, "alpha": alpha, "tests": [], "flagged": [], "message": None}
    adjusted = holm_adjust([t["p_value"] if t["p_value"] is not None else float("nan") for t in tests])
    for t, p in zip(tests, adjusted, strict=True):
        t["p_holm"] = _finite_or_none(p)
    flagged = [t for t in tests if t["p_holm"] is not None and t["p_holm"] < alpha]
    return {
        "stable": not flagged,
        "alpha": alpha,
        "tests": tests,
        "flagged": flagged,
        "message": UNSTABLE_MESSAGE if flagged else None,
    }


def _finite_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and np.isfinite(value) else None  # type: ignore[arg-type]
