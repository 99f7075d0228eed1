"""Stage 1 of the comparison: per-request metrics, slices, quality flags, graded correctness and
success, and the pooled gaps and verification steps every later stage reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from console.analysis.acceptance import request_totals_merge, steps_flatten, steps_per_request
from console.analysis.grading import correctness_flags
from console.analysis.metrics import chunk_times_flatten, gaps_flatten, request_success, requests_derive
from console.analysis.quality import STORED_COLUMNS, quality_flags
from console.analysis.quality_pairs import exact_match
from console.analysis.sessions import session_columns
from console.analysis.slices import slices_assign


def baseline_resolve(requests: pd.DataFrame, baseline_arm: str | None) -> str:
    """The baseline arm: ``baseline_arm`` when given (it must have requests), else the one arm
    flagged ``is_baseline``."""
    if baseline_arm is not None:
        if not (requests["arm"] == baseline_arm).any():
            raise ValueError(f"baseline arm {baseline_arm!r} has no requests")
        return baseline_arm
    arms = requests.loc[requests["is_baseline"].astype(bool), "arm"].unique()
    if len(arms) != 1:
        raise ValueError(f"expected exactly one baseline arm, found {list(arms)}")
    return str(arms[0])


def derive(
    requests: pd.DataFrame,
    *,
    base_arm: str,
    deadlines: Mapping[str, Mapping[str, float]] | None,
    references: Mapping[str, Mapping[str, Any] | None] | None = None,
):
    """Stage 1: per-request metrics, slices, quality flags, exact match, graded correctness
    (``console.analysis.grading``; ``references`` by request id) and success; the pooled gaps and
    the verification steps. Returns ``(derived, gaps, steps, request_steps)``."""
    # Rows grouped by arm, load and run: every grouping below then finds its rows contiguous.
    req = requests.sort_values(["arm", "load", "repeat", "run_id"], kind="stable").reset_index(drop=True)
    chunk_flat = chunk_times_flatten(req)
    derived = requests_derive(req, deadlines=deadlines, chunk_times_flat=chunk_flat)
    derived = session_columns(slices_assign(derived, baseline_arm=base_arm))  # turn 0 where single-turn
    flags = quality_flags(derived)
    stored = [c for names in STORED_COLUMNS.values() for c in names]
    derived = derived.drop(columns=[*stored, "output_valid", "quality_reason"], errors="ignore")
    derived = pd.concat([derived, flags, exact_match(derived, baseline_arm=base_arm)], axis=1)
    derived = pd.concat([derived, correctness_flags(derived, references)], axis=1)
    derived["success"] = request_success(derived).astype(float)
    derived["met_deadline_f"] = derived["met_deadline"].astype(float)
    gaps = gaps_flatten(derived, chunk_times_flat=chunk_flat)
    steps = steps_flatten(derived)
    request_steps = request_totals_merge(steps_per_request(steps, n_rows=len(derived)), derived)
    return derived, gaps, steps, request_steps
