"""Multi-turn conversations: each request's session and turn, session durations and TTFT by turn
(definitions in :mod:`console.analysis.metrics`). Seconds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from console.analysis.metrics import summary_stats


def session_columns(requests: pd.DataFrame) -> pd.DataFrame:
    """``requests`` with ``session_id`` (its own ``request_id`` where missing or empty) and ``turn``
    (0 where missing): frames from before sessions, and single-turn traces, are sessions of one."""
    out = requests.copy(deep=False)  # columns are added or replaced whole: the input stays as it was
    if "session_id" not in out:
        out["session_id"] = out["request_id"]
    else:
        empty = out["session_id"].isna() | (out["session_id"].astype(str) == "")
        out["session_id"] = out["session_id"].where(~empty, out["request_id"])
    out["turn"] = pd.to_numeric(out["turn"], errors="coerce").fillna(0).astype(np.int64) if "turn" in out else 0
    return out


def sessions_aggregate(derived: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """Per group of ``by`` (e.g. ``["arm", "load"]``): ``n_sessions``, ``n_multi_turn``, ``turns_mean``,
    ``n_sessions_completed`` (every turn completed), ``session_completed_share`` (fraction) and
    ``session_duration_s_{stat}`` over completed sessions (seconds; see :mod:`console.analysis.metrics`).

    ``derived`` is :func:`requests_derive` output with ``session_id`` and ``turn``
    (:func:`session_columns`); a session is keyed per run (``run_id``), so repeats never merge.
    """
    frame = session_columns(derived)
    keys = [*by, "run_id", "session_id"]
    grouped = frame.groupby(keys, sort=True, dropna=False)
    per = grouped.agg(
        turns=("turn", "size"),
        start_s=("scheduled_s", "min"),
        end_s=("finish_s", "max"),
        all_completed=("completed", "all"),
    ).reset_index()
    per["duration_s"] = np.where(per["all_completed"], per["end_s"] - per["start_s"], np.nan)
    rows = []
    for group, part in per.groupby(list(by), sort=True, dropna=False):
        values = group if isinstance(group, tuple) else (group,)
        row: dict[str, object] = dict(zip(by, values, strict=True))
        row["n_sessions"] = len(part)
        row["n_multi_turn"] = int((part["turns"] > 1).sum())
        row["turns_mean"] = float(part["turns"].mean())
        completed = int(part["all_completed"].sum())
        row["n_sessions_completed"] = completed
        row["session_completed_share"] = completed / len(part)
        for stat, v in summary_stats(part["duration_s"].to_numpy(dtype=float)).items():
            row[f"session_duration_s_{stat}"] = v
        rows.append(row)
    return pd.DataFrame(rows)


def turns_aggregate(derived: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """Per group of ``by`` and ``turn``: ``n_requests``, ``n_completed`` and ``ttft_s_{stat}``,
    ``e2e_s_{stat}`` (seconds) over completed requests: how latency grows with the context."""
    frame = session_columns(derived)
    rows = []
    for group, part in frame.groupby([*by, "turn"], sort=True, dropna=False):
        row: dict[str, object] = dict(zip([*by, "turn"], group, strict=True))
        row["n_requests"] = len(part)
        row["n_completed"] = int(part["completed"].sum())
        for metric in ("ttft_s", "e2e_s"):
            for stat, v in summary_stats(part[metric].to_numpy(dtype=float)).items():
                row[f"{metric}_{stat}"] = v
        rows.append(row)
    return pd.DataFrame(rows)
