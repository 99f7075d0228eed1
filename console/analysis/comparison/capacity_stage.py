"""Capacity at the SLO: the highest arrival-rate multiplier at which an arm's promised traffic
still meets its service-level objective, found by bisection over ordinary runs (a capacity
search, ``console.experiments.capacity_search``), and what it costs per successful task there.

Pure numpy/pandas; no Django. Rates are multipliers of the trace's own arrival rate (1.0 = as
recorded); times are seconds; money is USD; fractions are 0..1.

The SLO
-------
``{"traffic_class": "interactive" | "batch" | "all", "attainment": 0.99, "p95_tpot_s": 0.2,
"p95_e2e_s": 10}``: every bound given must hold over the run's requests of that class.
Attainment is the share of those requests that completed within their class deadlines
(``metrics.requests_derive``: ``met_deadline``). The p95s are nearest-rank over every request of
the class, a failed request counting as infinitely slow (so failures cannot make a p95 look
better); requests with fewer than two output tokens have no TPOT and are left out of it.

The search (per arm and repeat)
-------------------------------
Bisection in log-space inside the bracket ``[lo, hi]`` (``console.experiments.capacity_bisection``,
which decides the steps' multipliers while the search runs).

The interval across repeats
---------------------------
Each repeat's search ends with a bracket [highest pass, lowest fail]: its true threshold lies
inside it if pass/fail is monotone in the rate. The arm's interval is the **envelope** of its
repeats' brackets: [min over repeats of the highest pass, max over repeats of the lowest fail].
It holds both the search's resolution and the run-to-run spread; it is not a confidence interval
(with 2-3 repeats no distributional claim would be honest). With one repeat it is that search's
bracket alone, and says so. The point capacity is the geometric mean of the repeats' highest
passing multipliers. The ratio candidate / baseline has the interval
[candidate low / baseline high, candidate high / baseline low]: a lower end of 1 or more means the
candidate passed, in every repeat, at a rate at which the baseline failed in some repeat.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from console import numbers
from console.experiments.capacity_bisection import search_bracket

# The SLO's latency bounds as a failed step's reason names them.
SLO_WORDS = {"p95_tpot_s": "p95 TPOT", "p95_e2e_s": "p95 end-to-end latency"}

INTERVAL_METHOD = (
    "envelope of the repeats' search brackets: [lowest highest-passing, highest lowest-failing] "
    "multiplier; holds the search resolution and the run-to-run spread; not a confidence interval"
)


def nearest_rank(values: np.ndarray, q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; inf-safe (a failed request is +inf). NaN if empty."""
    if values.size == 0:
        return math.nan
    ordered = np.sort(values)
    return float(ordered[max(0, math.ceil(q * ordered.size) - 1)])


def slo_evaluate(derived: pd.DataFrame, slo: Mapping[str, Any]) -> dict[str, Any]:
    """Whether one run met ``slo``. ``derived`` is that run's rows from ``requests_derive``
    (``traffic_class``, ``completed``, ``met_deadline``, ``tpot_s``, ``e2e_s``).

    Returns ``{"n_requests", "attainment", "p95_tpot_s", "p95_e2e_s" (seconds; None when the
    class had none), "passed" (bool), "reasons" (one line per bound that failed)}``."""
    cls = slo.get("traffic_class", "all")
    rows = derived if cls == "all" else derived[derived["traffic_class"] == cls]
    n = len(rows)
    out: dict[str, Any] = {"n_requests": n, "attainment": None, "p95_tpot_s": None, "p95_e2e_s": None}
    if not n:
        return out | {"passed": False, "reasons": [f"no {cls} request in the run"]}
    completed = rows["completed"].to_numpy(dtype=bool)
    out["attainment"] = float(rows["met_deadline"].to_numpy(dtype=bool).mean())
    e2e = np.where(completed, rows["e2e_s"].to_numpy(dtype=float), np.inf)
    tpot = np.where(completed, rows["tpot_s"].to_numpy(dtype=float), np.inf)
    tpot = tpot[~np.isnan(tpot)]
    out["p95_e2e_s"] = nearest_rank(e2e, 0.95)
    out["p95_tpot_s"] = nearest_rank(tpot, 0.95) if tpot.size else None
    reasons = []
    if slo.get("attainment") is not None and not out["attainment"] >= slo["attainment"] - 1e-12:
        reasons.append(f"attainment {numbers.rate(out['attainment'])} < {numbers.rate(slo['attainment'])}")
    for key in ("p95_tpot_s", "p95_e2e_s"):
        bound = slo.get(key)
        if bound is None:
            continue
        value = out[key]
        if value is None:
            reasons.append(f"{SLO_WORDS[key]}: no request with two or more output tokens")
        elif not value <= bound:
            reasons.append(f"{SLO_WORDS[key]} {numbers.duration(value)} > {numbers.duration(bound)}")
    for key in ("p95_tpot_s", "p95_e2e_s"):
        if out[key] is not None and not math.isfinite(out[key]):
            out[key] = None  # JSON has no infinity; ``reasons`` keeps the failure
            out[f"{key}_failed_requests"] = True
    return out | {"passed": not reasons, "reasons": reasons}


def search_result(steps: Sequence[tuple[float, bool]]) -> dict[str, Any]:
    """One search's outcome: ``rate_multiplier`` (highest passing, None when nothing passed),
    ``bracket`` [highest pass or None, lowest fail or None], ``censored`` ("below": nothing
    passed, "above": nothing failed, None) and ``non_monotone``."""
    passed, failed, non_monotone = search_bracket(steps)
    censored = "below" if passed is None and steps else "above" if failed is None and steps else None
    return {
        "rate_multiplier": passed,
        "bracket": [passed, failed],
        "censored": censored,
        "non_monotone": non_monotone,
        "n_steps": len(steps),
    }


def arm_capacity(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Pool the searches of one arm's repeats (``search_result`` each): the point capacity
    (geometric mean of the repeats' highest passing multipliers; None when one found none) and
    the envelope interval [low, high] (None for an end a search left open)."""
    if not results:
        return {"rate_multiplier": None, "interval": [None, None], "n_repeats": 0}
    points = [r["rate_multiplier"] for r in results]
    point = (
        float(math.exp(np.mean(np.log(points)))) if all(p is not None and p > 0 for p in points) else None
    )
    lows = [r["bracket"][0] for r in results]
    highs = [r["bracket"][1] for r in results]
    low = min(lows) if all(x is not None for x in lows) else None
    high = max(highs) if all(x is not None for x in highs) else None
    return {"rate_multiplier": point, "interval": [low, high], "n_repeats": len(results)}


def capacity_ratio(cand: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """Candidate / baseline capacity, with the interval [cand low / base high, cand high / base
    low] from the envelopes (None where an end is open or zero)."""

    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    c_lo, c_hi = cand["interval"]
    b_lo, b_hi = base["interval"]
    return {
        "ratio": div(cand["rate_multiplier"], base["rate_multiplier"]),
        "ratio_interval": [div(c_lo, b_hi), div(c_hi, b_lo)],
    }


def capacity_stage(
    derived: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    search: Mapping[str, Any],
    base_arm: str,
    cost_per_hour_usd: float,
    arm_order: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The comparison's ``capacity`` section from the capacity-step runs only.

    ``derived``: their per-request rows from ``derive.derive`` (``run_id``, ``arm``,
    ``repeat``, ``rate_multiplier``, ``capacity_step``, ``traffic_class``, ``completed``,
    ``met_deadline``, ``tpot_s``, ``e2e_s``, ``scheduled_s``, ``success``); ``runs``: one row per
    step run (``run_id``, ``wall_s`` seconds, ``accelerator_count``). ``search`` is the
    experiment's ``capacity_search`` (``slo``, ``lo``, ``hi``, ``steps``).

    Per arm: the capacity and its interval, each repeat's search, the curve (every step: offered
    rate multiplier and requests/s, attainment, p95 TPOT and e2e, passed), the ratio to the
    baseline, and the cost per successful task at capacity: cost_per_hour_usd x accelerators /
    successful tasks per hour, the latter = successes / replay window (``wall_s``) of the runs at
    each repeat's capacity multiplier x 3600.
    """
    slo = dict(search.get("slo") or {})
    wall = runs.set_index("run_id")["wall_s"].astype(float).to_dict() if len(runs) else {}
    accel = (
        runs.set_index("run_id")["accelerator_count"].fillna(1).astype(float).to_dict()
        if len(runs) and "accelerator_count" in runs
        else {}
    )
    arms_seen = list(dict.fromkeys(derived["arm"].tolist())) if len(derived) else []
    order = [a for a in (arm_order or []) if a in arms_seen] + [a for a in arms_seen if a not in (arm_order or [])]
    out_arms: list[dict[str, Any]] = []
    for arm in order:
        rows = derived[derived["arm"] == arm]
        curve: list[dict[str, Any]] = []
        searches: list[dict[str, Any]] = []
        at_capacity: list[int] = []
        for repeat, rep_rows in rows.groupby("repeat", sort=True):
            result, rep_curve, capacity_run = _repeat_search(rep_rows, slo, repeat=int(repeat))
            curve += rep_curve
            searches.append(result)
            if capacity_run is not None:
                at_capacity.append(capacity_run)
        pooled = arm_capacity(searches)
        cap_rows = rows[rows["run_id"].isin(at_capacity)]
        window = sum(wall.get(r, math.nan) for r in at_capacity)
        successes = float(cap_rows["success"].sum())
        per_hour = successes / window * 3600.0 if at_capacity and window > 0 else None
        n_accel = max((accel.get(r, 1.0) for r in at_capacity), default=1.0)
        cost = cost_per_hour_usd * n_accel / per_hour if per_hour else None
        out_arms.append(
            {
                "arm": arm,
                "is_baseline": arm == base_arm,
                "rate_multiplier": pooled["rate_multiplier"],
                "interval": pooled["interval"],
                "n_repeats": pooled["n_repeats"],
                "searches": searches,
                "slo": slo,
                "steps": sorted(curve, key=lambda p: (p["rate_multiplier"], p["repeat"])),
                "successes_per_hour": per_hour,
                "cost_per_success_usd": cost,
                "cost_reason": None if cost is not None else "no passing step: no capacity to price",
                "notes": _search_notes(pooled, searches, search),
            }
        )
    base = next((a for a in out_arms if a["is_baseline"]), None)
    for a in out_arms:
        a.update(
            capacity_ratio(a, base) if base is not None and not a["is_baseline"] else {"ratio": None, "ratio_interval": [None, None]}
        )
    return {
        "slo": slo,
        "search": {k: search.get(k) for k in ("lo", "hi", "steps")},
        "interval_method": INTERVAL_METHOD,
        "arms": out_arms,
    }


def _repeat_search(
    rep_rows: pd.DataFrame, slo: Mapping[str, Any], *, repeat: int
) -> tuple[dict[str, Any], list[dict[str, Any]], int | None]:
    """One repeat's search of one arm: its result, its curve points (one per step run) and the
    run at its capacity multiplier (None without a passing step)."""
    curve: list[dict[str, Any]] = []
    steps: list[tuple[float, bool]] = []
    by_mult: dict[float, int] = {}
    for (step, run_id), run_rows in rep_rows.groupby(["capacity_step", "run_id"], sort=True):
        mult = float(run_rows["rate_multiplier"].iloc[0])
        ev = slo_evaluate(run_rows, slo)
        sched = run_rows["scheduled_s"].to_numpy(dtype=float)
        span = float(sched.max() - sched.min()) if sched.size > 1 else 0.0
        curve.append(
            {
                "repeat": repeat,
                "step": int(step),
                "run_id": int(run_id),
                "rate_multiplier": mult,
                "offered_rps": (sched.size - 1) / span if span > 0 else None,
                "attainment": ev["attainment"],
                "p95_tpot_s": ev["p95_tpot_s"],
                "p95_e2e_s": ev["p95_e2e_s"],
                "success_rate": float(run_rows["success"].mean()),
                "passed": ev["passed"],
                "reasons": ev["reasons"],
            }
        )
        steps.append((mult, ev["passed"]))
        by_mult[mult] = int(run_id)
    result = search_result(steps) | {"repeat": repeat}
    capacity_run = by_mult[result["rate_multiplier"]] if result["rate_multiplier"] is not None else None
    return result, curve, capacity_run


def _search_notes(pooled: Mapping[str, Any], searches: Sequence[Mapping[str, Any]], search: Mapping[str, Any]) -> list[str]:
    """What a reader must know about an arm's searches: one repeat, non-monotone steps, censoring."""
    notes = []
    if pooled["n_repeats"] == 1:
        notes.append("one repeat: the interval is that search's bracket only, with no run-to-run spread")
    if any(s["non_monotone"] for s in searches):
        notes.append("a step passed above a failing one (noise near the threshold); the bracket ignores it")
    if any(s["censored"] == "below" for s in searches):
        notes.append(f"a search found no passing rate down to {search.get('lo')}x: capacity below the lowest step")
    if any(s["censored"] == "above" for s in searches):
        notes.append(f"a search passed every step up to {search.get('hi')}x: capacity is at least its highest step")
    return notes
