"""Kept only for importers outside this change (analysis selectors and services, the experiment
views) until they import the modules below; removed at merge."""

from console.analysis.fit_assessment import (  # moved: console/analysis/fit_assessment.py
    fit_assess,
    numbers_lines,
)
from console.analysis.fit_stats import (  # moved: console/analysis/fit_stats.py
    FIT_VERSION,
    RECORDED_OUTPUT_KEYS,
    first_token_count,
    run_fit_stats,
)

__all__ = ["FIT_VERSION", "RECORDED_OUTPUT_KEYS", "first_token_count", "fit_assess", "numbers_lines", "run_fit_stats"]
