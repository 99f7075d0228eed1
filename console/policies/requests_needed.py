"""How many more requests would decide a slice the fit left off only for lack of data. Pure
functions; no Django.

A slice with the support, no quality regression and no lost success is still left off when its
benefit interval crosses zero. Its interval's half-width shrinks like 1 / sqrt(n) (a mean's
standard error; the order-statistic interval of a median too, for large n), so with ``n``
requests, observed effect ``e`` and half-width ``h`` (seconds), the interval would clear zero
(or a floor ``f``) once ``h * sqrt(n / N) <= |e| - f``:

    N = ceil(n * (h / (|e| - f)) ** 2)

and no number of requests would when ``|e| <= f``. What N means: if the true effect is the one
observed, an experiment of N requests gives an interval excluding zero **about half the time**
(its estimate lands on either side of the truth equally often); it is the size at which the
question becomes decidable, not a guarantee. For an 80% chance, take about twice N
(((1.96 + 0.84) / 1.96) ** 2 = 2.04 at the 95% level). The Student t quantile shrinks a little
with n too, so N is slightly conservative for small n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RequestsNeeded:
    n_needed: int | None  # requests at which the half-width reaches |effect| - floor
    more: int | None  # n_needed - n, at least 0
    reason: str | None  # why there is no number


INSIDE_FLOOR = "no number of requests would: the effect is inside the floor"
ZERO_EFFECT = "no number of requests would: the observed effect is zero"
NO_INTERVAL = "no interval to scale"


def requests_needed(*, n: int, effect: float, half_width: float, floor: float = 0.0) -> RequestsNeeded:
    """Requests for the interval around ``effect`` (half-width ``half_width`` at ``n`` requests,
    both in the effect's unit) to clear ``floor`` (>= 0) on the effect's side (module docstring)."""
    finite = all(isinstance(x, int | float) and math.isfinite(x) for x in (effect, half_width, floor))
    if not finite or n < 2 or half_width <= 0:
        return RequestsNeeded(None, None, NO_INTERVAL)
    margin = abs(effect) - max(floor, 0.0)
    if margin <= 0:
        return RequestsNeeded(None, None, INSIDE_FLOOR if floor > 0 else ZERO_EFFECT)
    n_needed = max(int(math.ceil(n * (half_width / margin) ** 2 - 1e-9)), n)
    return RequestsNeeded(n_needed, n_needed - n, None)


def slice_requests_needed(row: dict[str, Any]) -> RequestsNeeded:
    """For a slice the fit evaluated (``n``, ``benefit``, ``lo``, ``hi`` in seconds): how many
    requests would decide it, from its observed effect and half-width."""
    lo, hi, effect = row.get("lo"), row.get("hi"), row.get("benefit")
    if lo is None or hi is None or effect is None:
        return RequestsNeeded(None, None, NO_INTERVAL)
    return requests_needed(
        n=int(row.get("n") or 0), effect=float(effect), half_width=(float(hi) - float(lo)) / 2
    )
