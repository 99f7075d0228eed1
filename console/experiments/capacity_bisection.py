"""The capacity search's bisection: which rate multiplier its next step runs at, and the bracket
its finished steps leave. Pure Python; ``capacity_search.py`` creates the steps' runs with it,
and the comparison's capacity section (``analysis/comparison/capacity_stage.py``) reads
the brackets. Rates are multipliers of the trace's own arrival rate (1.0 = as recorded).

Bisection in log-space inside the bracket ``[lo, hi]``: the first step runs at sqrt(lo x hi);
each next step at the geometric midpoint of the highest passing multiplier below the lowest
failing one (``lo`` while none passed) and the lowest failing one (``hi`` while none failed).
It stops after ``steps`` runs, or once the bracket is narrower than :data:`MIN_RATIO`. The
bracket ends are never run themselves: with no passing step the capacity is "below" the lowest
failing multiplier, with no failing step "at least" the highest passing one (censored).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MIN_RATIO = 1.05  # a bracket narrower than 5 % is below what a replay of a few requests can tell


def search_bracket(steps: Sequence[tuple[float, bool]]) -> tuple[float | None, float | None, bool]:
    """(highest passing multiplier below the lowest failing one, lowest failing multiplier,
    non-monotone) over finished ``steps`` of (multiplier, passed). None: no such step. A pass
    above a failure (noise near the threshold) is ignored for the bracket and flagged."""
    fails = [m for m, ok in steps if not ok]
    low_fail = min(fails) if fails else None
    passes = [m for m, ok in steps if ok]
    below = [m for m in passes if low_fail is None or m < low_fail]
    return (max(below) if below else None), low_fail, len(below) != len(passes)


def next_multiplier(
    steps: Sequence[tuple[float, bool]],
    *,
    lo: float,
    hi: float,
    max_steps: int,
    min_ratio: float = MIN_RATIO,
) -> float | None:
    """The rate multiplier of the search's next step after ``steps`` (finished, in order, as
    (multiplier, passed)), or None when the search is over (``max_steps`` run, or the bracket is
    narrower than ``min_ratio``). Bisection in log-space, see the module docstring."""
    if len(steps) >= max_steps:
        return None
    if not steps:
        return math.sqrt(lo * hi)
    passed, failed, _ = search_bracket(steps)
    a = passed if passed is not None else lo
    b = failed if failed is not None else hi
    if not b / a > min_ratio:
        return None
    return math.sqrt(a * b)
