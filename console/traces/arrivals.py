"""Arrival processes for traces that carry no timing.

Specs (rates in requests per second, offsets in seconds from the trace start, first arrival at 0):
- ``constant:RATE``: one request every 1/RATE s.
- ``poisson:RATE``: exponential gaps with mean 1/RATE s.
- ``gamma:RATE:CV``: gamma gaps with mean 1/RATE s and coefficient of variation CV (CV > 1 is burstier
  than Poisson, CV = 1 is Poisson, CV < 1 is more regular).
- ``borrow:SOURCE``: the arrival times of a timing trace (a stored trace id, or a file path),
  taken in order and shifted so the first is 0.
- ``trace``: the file's own arrival times (the default where the file has them).

Generation uses ``random.Random(seed)``, so a spec and a seed always give the same arrivals.

Bounds (checked when a spec is parsed, so a degenerate process is a located error, never a crash
while arrivals are drawn): RATE from 1e-6 to 1e6 requests per second (one request every 11.6
days to one every microsecond); CV from 0.001 to 10. Outside them a double cannot carry the
process: the gamma shape 1/CV**2 rounds to 0 or overflows, and above CV 10 most gaps underflow
to exactly 0 s.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

PROCESSES = ("constant", "poisson", "gamma")
RATE_RANGE = (1e-6, 1e6)  # requests per second
CV_RANGE = (1e-3, 10.0)  # coefficient of variation of the gaps


class ArrivalSpecError(ValueError):
    pass


@dataclass(frozen=True)
class ArrivalSpec:
    kind: str  # constant | poisson | gamma | borrow | trace
    rate: float = 0.0
    cv: float = 1.0
    source: str = ""

    def __str__(self) -> str:
        if self.kind == "gamma":
            return f"gamma:{self.rate:g}:{self.cv:g}"
        if self.kind in ("constant", "poisson"):
            return f"{self.kind}:{self.rate:g}"
        if self.kind == "borrow":
            return f"borrow:{self.source}"
        return self.kind

    @property
    def generated(self) -> bool:
        return self.kind in PROCESSES


def _positive(text: str, what: str, spec: str, bounds: tuple[float, float]) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ArrivalSpecError(f"{spec!r}: {what} {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ArrivalSpecError(f"{spec!r}: {what} must be a positive number, got {text}")
    low, high = bounds
    if not low <= value <= high:
        raise ArrivalSpecError(f"{spec!r}: {what} must be between {low:g} and {high:g}, got {text}")
    return value


def arrival_spec_parse(spec: str) -> ArrivalSpec:
    """Parse ``constant:RATE``, ``poisson:RATE``, ``gamma:RATE:CV``, ``borrow:SOURCE`` or ``trace``."""
    text = spec.strip()
    kind, _, rest = text.partition(":")
    kind = kind.lower()
    if kind == "trace" and not rest:
        return ArrivalSpec("trace")
    if kind == "borrow":
        if not rest.strip():
            raise ArrivalSpecError(f"{spec!r}: borrow needs a trace id or a file path, e.g. borrow:12")
        return ArrivalSpec("borrow", source=rest.strip())
    parts = rest.split(":") if rest else []
    if kind in ("constant", "poisson"):
        if len(parts) != 1:
            raise ArrivalSpecError(f"{spec!r}: use {kind}:RATE (requests per second)")
        return ArrivalSpec(kind, rate=_positive(parts[0], "RATE", spec, RATE_RANGE))
    if kind == "gamma":
        if len(parts) != 2:
            raise ArrivalSpecError(
                f"{spec!r}: use gamma:RATE:CV (requests per second, coefficient of variation)"
            )
        return ArrivalSpec(
            "gamma",
            rate=_positive(parts[0], "RATE", spec, RATE_RANGE),
            cv=_positive(parts[1], "CV", spec, CV_RANGE),
        )
    raise ArrivalSpecError(
        f"{spec!r} is not an arrival process: use constant:RATE, poisson:RATE, gamma:RATE:CV, borrow:SOURCE or trace"
    )


def arrivals_generate(spec: ArrivalSpec, *, seed: int) -> Iterator[float]:
    """An endless stream of arrival offsets (s), starting at 0, for a generated process."""
    rng = random.Random(f"arrivals:{seed}")
    t = 0.0
    if spec.kind == "constant":
        gap = 1.0 / spec.rate
        i = 0
        while True:
            yield i * gap
            i += 1
    elif spec.kind == "poisson":
        while True:
            yield t
            t += rng.expovariate(spec.rate)
    elif spec.kind == "gamma":
        shape = 1.0 / (spec.cv * spec.cv)
        scale = 1.0 / (spec.rate * shape)
        while True:
            yield t
            t += rng.gammavariate(shape, scale)
    else:
        raise ArrivalSpecError(f"{spec} is not a generated process")
