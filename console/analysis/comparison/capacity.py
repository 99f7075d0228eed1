"""Kept only for ``console.experiments.capacity`` until it imports ``capacity_stage``."""

from console.analysis.comparison.capacity_stage import (  # moved: console/analysis/comparison/capacity_stage.py
    DEFAULT_HI,
    DEFAULT_LO,
    DEFAULT_STEPS,
    MAX_MULTIPLIER,
    MAX_STEPS,
    MIN_MULTIPLIER,
    MIN_RATIO,
    SLO_BOUNDS,
    next_multiplier,
    slo_evaluate,
)

__all__ = [
    "DEFAULT_HI",
    "DEFAULT_LO",
    "DEFAULT_STEPS",
    "MAX_MULTIPLIER",
    "MAX_STEPS",
    "MIN_MULTIPLIER",
    "MIN_RATIO",
    "SLO_BOUNDS",
    "next_multiplier",
    "slo_evaluate",
]
