"""Was an arm past saturation at a load? Work arriving faster than the server finishes it: its
queue grows over the replay window, so what a request waits depends on when it arrived, and the
A/A floor of an overloaded baseline is wide. Read from what every run records per request
(``scheduled_s``: its arrival, ``first_token_s``, ``finish_s``, ``completed``; seconds from the
run's start). Pure numpy/pandas; no Django.

Per run (its requests in arrival order, at least ``MIN_REQUESTS``):

- **arrival rate** (requests/s): the inverse of the least-squares slope of the sorted scheduled
  times against their rank; **completed rate**: the same over the sorted finish times of the
  completed requests. A slope over every request is the steady pace; the first and last
  request alone (``(n - 1) / span``) swing with one long answer at either end.
- **waits**: scheduled -> first token (client-side queueing, the server's queue and the prefill),
  the median of the first third of the requests by arrival and of the last third.

An arm at a load takes the median of each figure over its runs (its repeats), then is **past
saturation** when either holds:

1. the completed rate is below ``RATE_SHORT`` (0.85) x the arrival rate; or
2. the waits grew: the last third's median wait is at least ``WAIT_GROWTH`` (2) x the first
   third's, and larger by at least ``WAIT_RISE_MIN_S`` (0.5 s) and by ``WAIT_RISE_SPAN`` (0.1) x
   the arrival window.

Why these numbers: a queue that keeps up finishes requests at the pace they arrive and its waits
do not trend; an overloaded one finishes at its service rate and its waits grow by
(1 - service rate / arrival rate) seconds per second. Simulated M/G/1 runs (lognormal service
times, coefficient of variation 0.5, two repeats, the median over them) gave, for 28 and 200
requests: at utilisation 0.5 no notice; at 0.8 (busy, not saturated) 11% and 0%; at 1.3
(saturated) 91% and 98%; at 1.7, 100% and 100%. A looser rate tolerance (0.9) or a rise threshold
without the window term (0.5 s alone) flagged 17-39% of the busy-but-stable runs; a rise of 0.5 s
is also what a fast GPU server's prefill never reaches on its own. With fewer than 28 requests a
run's thirds are too small to trust either way: read the notice as a warning, not a proof.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import pandas as pd

from console.jsonutil import json_safe

MIN_REQUESTS = 6  # two per third
RATE_SHORT = 0.85  # completed / arrival below this: the server did not keep up
WAIT_GROWTH = 2.0  # last third's median wait / first third's
WAIT_RISE_MIN_S = 0.5  # seconds the median wait must rise at least
WAIT_RISE_SPAN = 0.1  # ... and at least this fraction of the arrival window (seconds)


class SaturationRow(TypedDict):
    """One arm at one load (``schema.SaturationRow``): medians over its runs."""

    arm: str
    load: str
    is_baseline: bool
    n_runs: int  # runs with at least MIN_REQUESTS requests
    arrival_rps: float | None  # requests/s scheduled
    completed_rps: float | None  # requests/s completed
    wait_first_s: float | None  # median wait of the first third by arrival (seconds)
    wait_last_s: float | None  # ... of the last third
    rate_short: bool | None
    waits_grew: bool | None
    saturated: bool | None  # None: not measured (``reason`` says why)
    reason: str | None


def pace_rps(times: np.ndarray) -> float:
    """Events per second: the inverse least-squares slope of the sorted finite ``times``
    (seconds) against their rank. NaN for fewer than two times or no spread."""
    t = np.sort(np.asarray(times, dtype=float)[np.isfinite(times)])
    if t.size < 2:
        return float("nan")
    rank = np.arange(t.size, dtype=float)
    slope = float(np.polyfit(rank, t, 1)[0])
    return 1.0 / slope if slope > 0 else float("nan")


def run_figures(run: pd.DataFrame) -> dict[str, float] | None:
    """One run's arrival and completed rates (requests/s), its first and last thirds' median
    waits and its arrival window (seconds); None with fewer than ``MIN_REQUESTS`` requests."""
    run = run.loc[np.isfinite(run["scheduled_s"].to_numpy(dtype=float))].sort_values(
        "scheduled_s", kind="stable"
    )
    if len(run) < MIN_REQUESTS:
        return None
    sched = run["scheduled_s"].to_numpy(dtype=float)
    completed = run["completed"].to_numpy(dtype=bool)
    finish = run["finish_s"].to_numpy(dtype=float)
    first = run["first_token_s"].to_numpy(dtype=float)
    # A completed answer with no token: the user had it at its finish.
    first = np.where(np.isfinite(first), first, np.where(completed, finish, np.nan))
    wait = first - sched
    thirds = np.array_split(np.arange(len(run)), 3)
    first_third, last_third = wait[thirds[0]], wait[thirds[-1]]
    return {
        "arrival_rps": pace_rps(sched),
        "completed_rps": pace_rps(finish[completed]) if completed.sum() >= 2 else 0.0,
        "wait_first_s": float(np.nanmedian(first_third)) if np.isfinite(first_third).any() else float("nan"),
        "wait_last_s": float(np.nanmedian(last_third)) if np.isfinite(last_third).any() else float("nan"),
        "span_s": float(sched[-1] - sched[0]),
    }


def saturation_judge(figures: dict[str, float]) -> tuple[bool | None, bool | None]:
    """(rate short, waits grew) from an arm's figures (``run_figures``' keys); None where a
    figure is missing."""
    arrival, done = figures["arrival_rps"], figures["completed_rps"]
    rate_short = bool(done < RATE_SHORT * arrival) if np.isfinite(arrival) and np.isfinite(done) else None
    w0, w1, span = figures["wait_first_s"], figures["wait_last_s"], figures["span_s"]
    grew = None
    if np.isfinite(w0) and np.isfinite(w1):
        rise = max(WAIT_RISE_MIN_S, WAIT_RISE_SPAN * span) if np.isfinite(span) else WAIT_RISE_MIN_S
        grew = bool(w1 >= WAIT_GROWTH * w0 and w1 - w0 >= rise)
    return rate_short, grew


def saturation_rows(derived: pd.DataFrame, *, base_arm: str) -> list[SaturationRow]:
    """One row per arm x load (in the order they first appear), JSON-ready: the medians of its
    runs' figures and whether it was past saturation (module docstring)."""
    cols = ["arm", "load", "run_id", "scheduled_s", "first_token_s", "finish_s", "completed"]
    out = []
    for (arm, load), group in derived[cols].groupby(["arm", "load"], sort=False):
        runs = [f for _, r in group.groupby("run_id", sort=True) if (f := run_figures(r)) is not None]
        out.append(json_safe(_arm_row(str(arm), str(load), runs, is_baseline=arm == base_arm)))
    return out


def _arm_row(arm: str, load: str, runs: list[dict[str, float]], *, is_baseline: bool) -> SaturationRow:
    figures = {
        k: _median(runs, k) for k in ("arrival_rps", "completed_rps", "wait_first_s", "wait_last_s", "span_s")
    }
    rate_short, grew = saturation_judge(figures) if runs else (None, None)
    measured = rate_short is not None or grew is not None
    reason: str | None = None
    if not runs:
        reason = f"not measured: no run with at least {MIN_REQUESTS} requests"
    elif not measured:
        reason = "not measured: no rate or wait could be read off the runs"
    return {
        "arm": arm,
        "load": load,
        "is_baseline": bool(is_baseline),
        "n_runs": len(runs),
        "arrival_rps": figures["arrival_rps"],
        "completed_rps": figures["completed_rps"],
        "wait_first_s": figures["wait_first_s"],
        "wait_last_s": figures["wait_last_s"],
        "rate_short": rate_short,
        "waits_grew": grew,
        "saturated": bool(rate_short or grew) if measured else None,
        "reason": reason,
    }


def _median(runs: list[dict[str, float]], key: str) -> float:
    """The median over the runs of one figure, NaN when no run has it."""
    values = np.array([f[key] for f in runs], dtype=float)
    return float(np.median(values[np.isfinite(values)])) if np.isfinite(values).any() else float("nan")
