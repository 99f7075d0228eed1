"""Stage 5 of the comparison: quality counts and regressions, output divergence from the
baseline, and graded correctness (``console.analysis.quality``, ``console.analysis.grading``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from console.analysis.comparison.records import records
from console.analysis.comparison.rows import Correctness
from console.analysis.grading import correctness_counts, correctness_rates, correctness_regressions
from console.jsonutil import json_safe


def correctness_stage(
    derived: pd.DataFrame, *, base_arm: str, n_boot: int, seed: int, ci: float, max_regressions: int
) -> Correctness:
    """Stage 5b: graded correctness per arm x load x task with request-clustered intervals, the
    paired counts (check ``"correct"``) that feed the gate's quality criterion, the regressions."""
    gradable = derived[derived["gradable"].to_numpy(dtype=bool)]
    regressions = correctness_regressions(gradable, baseline_arm=base_arm)
    return {
        "rates": json_safe(records(correctness_rates(gradable, n_boot=n_boot, seed=seed, ci=ci))),
        "counts": json_safe(records(correctness_counts(derived, baseline_arm=base_arm))),
        "regressions": json_safe(records(regressions.head(max_regressions))),
        "n_regressions": len(regressions),
        "n_gradable": int(len(gradable)),
        "n_not_gradable": int(len(derived) - len(gradable)),
    }


def divergence_rows(derived: pd.DataFrame, *, base_arm: str) -> pd.DataFrame:
    """Per candidate arm x load: requests compared with the baseline's output, how many diverged,
    and the median first diverging token position (tokens)."""
    cands = derived[derived["arm"] != base_arm]
    compared = cands[cands["exact_match"].notna()]
    return (
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


def quality_section(
    *,
    counts: pd.DataFrame,
    regressions: pd.DataFrame,
    max_regressions: int,
    divergence: pd.DataFrame,
    first_divergences: pd.DataFrame,
) -> dict[str, Any]:
    """The comparison's ``quality`` section; the regression list capped at ``max_regressions``
    (the count stays complete)."""
    return {
        "counts": records(counts),
        "regressions": records(regressions.head(max_regressions)),
        "n_regressions": len(regressions),
        "truncated": len(regressions) > max_regressions,
        "divergence": records(divergence),
        "first_divergences": records(first_divergences),
    }
