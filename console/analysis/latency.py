"""Latency and throughput aggregates per group (run, arm x load, slice) of the derived
per-request frame (:func:`console.analysis.metrics.requests_derive`); definitions in
:mod:`console.analysis.metrics`. Seconds, tokens, requests/s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from console.analysis.metrics import REQUEST_METRICS, group_codes, summary_stats


def _group_order(codes: np.ndarray) -> np.ndarray | slice:
    """Positions that sort ``codes`` (stable); a plain slice when they are already sorted."""
    if codes.size == 0 or np.all(codes[1:] >= codes[:-1]):
        return slice(None)
    small = codes.astype(np.int16) if codes.max() < np.iinfo(np.int16).max else codes
    return np.argsort(small, kind="stable")  # radix sort for 16-bit keys


def metrics_aggregate(
    derived: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    by: Sequence[str],
    gaps: Mapping[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """One row per group of ``by`` (columns of ``derived``), e.g. ``["run_id"]``,
    ``["arm", "load"]`` or ``["arm", "load", "task"]``.

    Columns: the group keys; ``n_requests``, ``n_completed``, ``n_failed``, ``n_met_deadline``,
    ``n_runs``, ``wall_s`` (Σ over the group's runs), ``output_tokens``; ``{metric}_{stat}`` for
    every metric in ``REQUEST_METRICS`` (seconds) and stat in ``STATS``; when ``gaps`` (from
    :func:`gaps_flatten` over the same ``derived``) is given, the pooled ``itl_chunk_s_*`` and
    ``itl_token_s_*`` too; ``completed_rps``, ``goodput_rps`` (requests/s),
    ``output_tokens_per_s`` (tokens/s), ``deadline_attainment`` (fraction).
    """
    codes, keys = group_codes(derived, by)
    order = _group_order(codes)
    bounds = np.searchsorted(codes[order], np.arange(len(keys) + 1))
    row_bounds = bounds  # when ``order`` is a slice, group g is rows bounds[g] to bounds[g + 1]
    columns = {m: derived[m].to_numpy(dtype=float)[order] for m in REQUEST_METRICS}
    gap_sets: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if gaps is not None:
        for name, vkey, rkey in (
            ("itl_chunk_s", "chunk_gap_s", "chunk_row"),
            ("itl_token_s", "token_gap_s", "token_row"),
        ):
            if isinstance(order, slice):
                # Groups are contiguous row ranges and gap rows are sorted: no gather needed.
                gap_sets[name] = (gaps[vkey], np.searchsorted(gaps[rkey], row_bounds))
                continue
            gcodes = codes[gaps[rkey]]
            gorder = _group_order(gcodes)
            gbounds = np.searchsorted(gcodes[gorder], np.arange(len(keys) + 1))
            gap_sets[name] = (gaps[vkey][gorder], gbounds)
    rows = []
    for g in range(len(keys)):
        sel = slice(bounds[g], bounds[g + 1])
        row: dict[str, float] = {}
        for m, values in columns.items():
            for stat, v in summary_stats(values[sel]).items():
                row[f"{m}_{stat}"] = v
        for name, (values, gb) in gap_sets.items():
            for stat, v in summary_stats(values[gb[g] : gb[g + 1]]).items():
                row[f"{name}_{stat}"] = v
        rows.append(row)
    out = pd.concat([keys, pd.DataFrame(rows, index=keys.index)], axis=1)

    n_groups = len(keys)
    out["n_requests"] = np.bincount(codes, minlength=n_groups).astype(np.int64)
    for col, src in (
        ("n_completed", "completed"),
        ("n_met_deadline", "met_deadline"),
        ("output_tokens", "output_tokens"),
    ):
        weights = derived[src].to_numpy(dtype=float)
        out[col] = np.rint(np.bincount(codes, weights=weights, minlength=n_groups)).astype(np.int64)
    run_groups = pd.DataFrame({"_g": codes, "run_id": derived["run_id"].to_numpy()}).drop_duplicates()
    run_groups["wall_s"] = run_groups["run_id"].map(runs.set_index("run_id")["wall_s"].astype(float))
    out["n_runs"] = np.bincount(run_groups["_g"].to_numpy(), minlength=n_groups).astype(np.int64)
    wall = run_groups.groupby("_g")["wall_s"].sum(min_count=1).reindex(np.arange(n_groups))
    out["n_failed"] = out["n_requests"] - out["n_completed"]
    out["wall_s"] = wall.to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["completed_rps"] = out["n_completed"] / out["wall_s"]
        out["goodput_rps"] = out["n_met_deadline"] / out["wall_s"]
        out["output_tokens_per_s"] = out["output_tokens"] / out["wall_s"]
        out["deadline_attainment"] = out["n_met_deadline"] / out["n_requests"]
    return out
