"""Run until decided: the stopping rule for an experiment that adds repeats until its declared
primary endpoint is decided or its budget is spent.

The rule
--------
The experiment plans at most ``max_repeats`` repeats and looks at the primary endpoint after
each repeat from ``first_look`` on (2 by default: the A/A noise floor needs two baseline
repeats), so it has ``K = max_repeats - first_look + 1`` possible looks, fixed before it starts.
At every look it computes the paired, request-clustered interval of the endpoint (the same
interval the comparison reports) at the **Bonferroni-over-looks level** ``1 - alpha / (K m)``
(``m``: how many primary endpoints, candidate arms x loads, share the alpha) and stops at the
first look where the interval

* lies beyond the noise floor on the good side (``hi < -floor`` for a latency): **better**;
* lies beyond the floor on the bad side (``lo > floor``): **worse**;
* lies inside ``(-margin, +margin)``, the equivalence margin the user declared: **equivalent**;

or, undecided, when the next repeat would pass ``max_repeats`` or the budget of runs or
accelerator-hours: **undecided** (the reason says which).

What it guarantees, and why Bonferroni
--------------------------------------
If each look's interval covers the truth with probability at least ``1 - alpha / (K m)``, the
union bound gives: with probability at least ``1 - alpha`` **every** interval of every look and
endpoint covers the truth at once, whatever the dependence between looks and whenever the
experiment stops (early, at the budget, or by a user's cancel). So the interval at the look it
stopped covers the truth with probability at least ``1 - alpha``, and a false decision (better
when the truth is >= 0, worse when it is <= 0, equivalent when ``|truth| >= margin``) needs that
interval to miss, so the false-decision rate is at most ``alpha`` too. A decision also needs the
floor (``hi < -floor <= 0``), so the floor only makes decisions rarer.

The guarantee is only as good as the per-look intervals: they are bootstrap intervals, calibrated
by simulation (``manage.py calibrate --sequential``, docs/statistics.md), not exact.

An error-spending boundary (O'Brien-Fleming, Pocock) spends alpha more efficiently, but its
boundaries come from the joint normal law of the looks with independent increments. Here every
look re-uses the same requests (a repeat replays the same trace), so the looks share the
requests' between-request variation and the increments are not independent; the boundaries would
need that correlation estimated from the data, a guarantee we could not state plainly. An
always-valid confidence sequence needs i.i.d. increments with a known variance bound, which a
repeat of a percentile is not. Bonferroni is conservative (its looks are strongly correlated, so
it spends less than alpha), and valid under any dependence.

It lives in ``console.experiments`` because the option's validation (``until_decided.py``) and
the calibration (``console.decisions.calibration_sequential``) both import it; the loop that
takes the looks is ``console.analysis.sequential_looks``.

Pure Python; no Django. Units: every delta, bound, floor and margin is in the endpoint's unit
(seconds for a latency), candidate minus baseline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["continue", "better", "worse", "equivalent", "undecided", "mixed"]
DECIDED: tuple[Outcome, ...] = ("better", "worse", "equivalent")


@dataclass(frozen=True)
class Plan:
    """What an experiment declares before its first run.

    ``max_repeats``: the most repeats it may run; ``first_look``: the first repeat count it looks
    at; ``alpha``: the false-decision rate over all looks and endpoints; ``margin``: the
    equivalence margin in the endpoint's unit (None: no equivalence decision);
    ``lower_is_better``: True for latencies; ``endpoints``: how many primary endpoints share
    alpha; ``max_runs`` / ``max_accelerator_hours``: the budget (None: only ``max_repeats``)."""

    max_repeats: int
    first_look: int = 2
    alpha: float = 0.05
    margin: float | None = None
    lower_is_better: bool = True
    endpoints: int = 1
    max_runs: int | None = None
    max_accelerator_hours: float | None = None

    def __post_init__(self) -> None:
        problems = plan_problems(self)
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def looks(self) -> int:
        """K: the number of looks planned (one after each repeat from ``first_look`` on)."""
        return self.max_repeats - self.first_look + 1

    @property
    def level(self) -> float:
        """The confidence level of every look's interval: 1 - alpha / (K m)."""
        return 1.0 - self.alpha / (self.looks * self.endpoints)


def plan_problems(plan: Plan) -> list[str]:
    """Why ``plan`` cannot run, in words a form can show (empty when it can)."""
    out = []
    if not 1 <= plan.first_look <= plan.max_repeats:
        out.append(f"first look ({plan.first_look}) must be between 1 and max repeats ({plan.max_repeats})")
    if plan.max_repeats > 50:
        out.append(f"max repeats ({plan.max_repeats}) must be at most 50")
    if not 0 < plan.alpha < 0.5:
        out.append(f"alpha ({plan.alpha}) must be between 0 and 0.5")
    if plan.margin is not None and not (math.isfinite(plan.margin) and plan.margin > 0):
        out.append(f"equivalence margin ({plan.margin}) must be a positive number (the endpoint's unit)")
    if plan.endpoints < 1:
        out.append("endpoints must be at least 1")
    if plan.max_runs is not None and plan.max_runs < 1:
        out.append(f"run budget ({plan.max_runs}) must be at least 1")
    if plan.max_accelerator_hours is not None and not plan.max_accelerator_hours > 0:
        out.append(f"accelerator-hour budget ({plan.max_accelerator_hours}) must be positive")
    return out


@dataclass(frozen=True)
class Look:
    """The primary endpoint at one look: ``repeats`` run so far; ``delta`` (candidate - baseline),
    ``lo``/``hi`` its interval at ``Plan.level``; ``noise_floor`` (None: not measured)."""

    repeats: int
    delta: float
    lo: float
    hi: float
    noise_floor: float | None


@dataclass(frozen=True)
class Spent:
    """What the experiment has used so far, and what one more repeat costs (runs; busy
    accelerator-hours, estimated from the repeats so far)."""

    runs: int = 0
    accelerator_hours: float = 0.0
    runs_per_repeat: int = 0
    accelerator_hours_per_repeat: float = 0.0


@dataclass(frozen=True)
class Stop:
    """The rule's answer after a look: ``outcome`` and the sentence the experiment page shows."""

    outcome: Outcome
    repeats: int
    reason: str

    @property
    def stopped(self) -> bool:
        return self.outcome != "continue"


def look_outcome(look: Look, *, plan: Plan) -> Outcome:
    """better, worse or equivalent when ``look``'s interval decides, else continue. Better and
    worse need a measured floor (one repeat has none: only equivalence can be decided)."""
    if not all(math.isfinite(v) for v in (look.delta, look.lo, look.hi)):
        return "continue"  # not measured (too few requests): nothing is decided
    floor = look.noise_floor
    if floor is not None and math.isfinite(floor):
        good_hi, bad_lo = (look.hi, look.lo) if plan.lower_is_better else (-look.lo, -look.hi)
        if good_hi < -floor:
            return "better"
        if bad_lo > floor:
            return "worse"
    if plan.margin is not None and -plan.margin < look.lo and look.hi < plan.margin:
        return "equivalent"
    return "continue"


Budget = Literal["max_repeats", "runs", "accelerator_hours"]


def budget_spent(plan: Plan, spent: Spent, repeats: int) -> Budget | None:
    """Which part of the budget one more repeat would pass, after ``repeats`` repeats (None:
    none, another repeat is allowed): the most repeats planned, the runs, the accelerator-hours."""
    if repeats >= plan.max_repeats:
        return "max_repeats"
    if plan.max_runs is not None and spent.runs + spent.runs_per_repeat > plan.max_runs:
        return "runs"
    if (
        plan.max_accelerator_hours is not None
        and spent.accelerator_hours + spent.accelerator_hours_per_repeat > plan.max_accelerator_hours
    ):
        return "accelerator_hours"
    return None


def _budget_left(plan: Plan, spent: Spent, repeats: int) -> str | None:
    """Why one more repeat is not allowed (None: it is)."""
    which = budget_spent(plan, spent, repeats)
    if which == "max_repeats":
        return f"undecided after {repeats} repeats, the most planned"
    if which == "runs":
        return f"undecided: another repeat ({spent.runs_per_repeat} runs) would pass the budget of {plan.max_runs} runs"
    if which == "accelerator_hours":
        return (
            f"undecided: another repeat (about {spent.accelerator_hours_per_repeat:.2f} accelerator-hours) "
            f"would pass the budget of {plan.max_accelerator_hours:g} accelerator-hours"
        )
    return None


def stop_decide(looks: Sequence[Look], *, plan: Plan, spent: Spent | None = None) -> Stop:
    """The rule after the latest look of one endpoint (``looks`` in order, one per repeat count
    from ``plan.first_look``). The first deciding look decides: under the simultaneous coverage
    above, a decision stays valid whatever later looks show."""
    if not looks:
        raise ValueError("no look yet")
    counts = [lk.repeats for lk in looks]
    if counts != list(range(plan.first_look, plan.first_look + len(looks))) or counts[-1] > plan.max_repeats:
        raise ValueError(
            f"looks must be at repeats {plan.first_look}, {plan.first_look + 1}, ... up to {plan.max_repeats}: got {counts}"
        )
    pct = f"{plan.level:.2%}"
    for lk in looks:
        outcome = look_outcome(lk, plan=plan)
        if outcome in DECIDED:
            return Stop(outcome, lk.repeats, _decided_reason(outcome, lk, plan=plan, pct=pct))
    last = looks[-1]
    why = _budget_left(plan, spent or Spent(), last.repeats)
    if why is not None:
        interval = f"the {pct} interval [{last.lo:.4g}, {last.hi:.4g}]"
        return Stop("undecided", last.repeats, f"{why}: {interval} decides nothing")
    return Stop("continue", last.repeats, f"undecided after {last.repeats} repeats: adding a repeat")


def _decided_reason(outcome: Outcome, lk: Look, *, plan: Plan, pct: str) -> str:
    interval = f"the {pct} interval [{lk.lo:.4g}, {lk.hi:.4g}]"
    if outcome == "equivalent":
        return f"equivalent after {lk.repeats} repeats: {interval} lies inside the margin ±{plan.margin:.4g}"
    side = "below" if (outcome == "better") == plan.lower_is_better else "above"
    return (
        f"{outcome} after {lk.repeats} repeats: {interval} lies {side} the noise floor ±{lk.noise_floor:.4g}"
    )


def experiment_stop(stops: Sequence[Stop]) -> Stop:
    """One answer for the experiment from its endpoints' (every candidate arm x load): continue
    while any endpoint continues; once none does, the endpoints' common outcome, ``undecided``
    when any is undecided, else ``mixed`` (each decided, not alike; the reason lists them)."""
    if not stops:
        raise ValueError("no endpoint")
    repeats = max(s.repeats for s in stops)
    pending = sum(s.outcome == "continue" for s in stops)
    if pending:
        return Stop("continue", repeats, f"{pending} of {len(stops)} endpoints undecided: adding a repeat")
    outcomes = {s.outcome for s in stops}
    outcome: Outcome = "undecided" if "undecided" in outcomes else "mixed"
    if len(outcomes) == 1:
        outcome = stops[0].outcome
    return Stop(outcome, repeats, "; ".join(s.reason for s in stops))
