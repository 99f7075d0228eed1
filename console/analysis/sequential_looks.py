"""Run until decided, the loop: after each comparison refresh, look at the declared primary
endpoint at the adjusted level and either stop or add one repeat (the option and the writes:
``console.experiments.until_decided``; the rule: ``console.experiments.sequential``).

A look needs the primary endpoint's interval at ``1 - alpha / (K m)``, not at the stored
comparison's 95%. The comparison computes every interval at one level (``ci``), so
:func:`primary_intervals` recomputes only the primary endpoint's, at the plan's level, with the
comparison's own pieces: the same derived frame (``comparison.derive.derive``), the same universe
and request clusters per load, the same seed and replicate count, so the same bootstrap replicates
``paired_stage`` drew (the replicates depend only on the clusters, the seed and the count, never
on which columns are resampled); at 0.95 it gives the stored interval digit for digit
(``tests/experiments/test_until_decided.py`` checks it). The noise floor is the stored
comparison's (the promised class's A/A floor at that load): the level changes no floor.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from django.utils import timezone

from console.analysis.comparison.bootstrap import (
    DEFAULT_N_BOOT,
    bootstrap_distributions,
    point_stat,
    reportable,
)
from console.analysis.comparison.derive import derive
from console.analysis.comparison.intervals import paired_delta
from console.analysis.comparison.spec import METRIC_COLUMNS
from console.analysis.selectors import comparison_for_experiment, comparison_key, experiment_finished_runs
from console.experiments.models import Experiment
from console.experiments.sequential import Look, Plan, Spent, Stop, budget_spent, experiment_stop, stop_decide
from console.experiments.until_decided import (
    until_decided_continue,
    until_decided_plan,
    until_decided_spent,
    until_decided_stop,
)
from console.jsonutil import json_safe
from console.results.selectors import results_frames

# paired_stage seeds each load's bootstrap so (``seed + LOAD_SEED_STEP * (load index + 1)``).
LOAD_SEED_STEP = 104729


def primary_intervals(
    derived: pd.DataFrame,
    *,
    base_arm: str,
    endpoints: dict[str, Any],
    level: float,
    n_boot: int,
    seed: int,
) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (candidate arm, load): the declared primary endpoint of the promised class, candidate
    minus baseline, paired and request-clustered, at the two-sided ``level``: ``paired_delta``'s
    dict (``delta``, ``delta_lo``, ``delta_hi`` in the metric's unit, seconds; ``measured``,
    ``reason``, ``n_requests``). ``derived`` is the comparison's derived frame; ``n_boot`` and
    ``seed`` the stored comparison's."""
    metric, stat = endpoints["primary_metric"], endpoints["primary_stat"]
    column = METRIC_COLUMNS.get(metric, metric)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for li, load in enumerate(pd.unique(derived["load"])):
        at_load = derived[derived["load"] == load]
        base_rows = at_load[at_load["arm"] == base_arm]
        if base_rows.empty:
            continue
        universe = pd.MultiIndex.from_frame(base_rows[["request_id", "repeat"]].drop_duplicates())
        codes, _ = pd.factorize(universe.get_level_values("request_id").to_numpy())
        base = _aligned(base_rows, universe, column)
        promised = base["traffic_class"].to_numpy() == endpoints["promised_class"]
        columns: dict[Any, np.ndarray] = {}
        stats: dict[Any, tuple[str, ...]] = {}
        pairs: dict[str, int] = {}
        for arm in (a for a in pd.unique(at_load["arm"]) if a != base_arm):
            cand = _aligned(at_load[at_load["arm"] == arm], universe, column)
            b, c = base[column].to_numpy(dtype=float), cand[column].to_numpy(dtype=float)
            both = np.isfinite(b) & np.isfinite(c) & promised
            pairs[arm] = int(np.count_nonzero(np.bincount(codes[both], minlength=codes.size)))
            columns[(arm, "base")], columns[(arm, "cand")] = (
                np.where(both, b, np.nan),
                np.where(both, c, np.nan),
            )
            stats[(arm, "base")] = stats[(arm, "cand")] = (stat,) if reportable(pairs[arm], stat) else ()
        boots = bootstrap_distributions(
            {k: v for k, v in columns.items() if stats[k]},
            stats=stats,
            clusters=codes,
            n_boot=n_boot,
            seed=seed + LOAD_SEED_STEP * (li + 1),
        )
        for arm, n_req in pairs.items():
            out[(str(arm), str(load))] = paired_delta(
                stat=stat,
                base_point=point_stat(columns[(arm, "base")], stat),
                cand_point=point_stat(columns[(arm, "cand")], stat),
                base_boot=boots.get(((arm, "base"), stat), np.full(0, np.nan)),
                cand_boot=boots.get(((arm, "cand"), stat), np.full(0, np.nan)),
                n_requests=n_req,
                ci=level,
            )
    return out


def _aligned(frame: pd.DataFrame, universe: pd.MultiIndex, column: str) -> pd.DataFrame:
    """``frame``'s ``column`` and traffic class on the baseline's (request, repeat) rows, as the
    comparison aligns them (first row of a duplicated pair)."""
    slim = frame[["request_id", "repeat", column, "traffic_class"]]
    return (
        slim.drop_duplicates(["request_id", "repeat"]).set_index(["request_id", "repeat"]).reindex(universe)
    )


def _number(value: Any) -> float:
    return float(value) if value is not None and math.isfinite(float(value)) else math.nan


def experiment_sequential_advance(*, experiment_id: int) -> str:
    """The loop's step, after a comparison refresh (``workers.compute_comparison``): when the
    experiment runs until decided, has not stopped, every run it has is done and the stored
    comparison is of those runs, look at the primary endpoints at the plan's level, then record
    the stop or claim and add one repeat. Safe to run twice, at once or one after the other: the
    writes are conditional on the repeat count looked at. Returns what it did, in words."""
    experiment = Experiment.objects.filter(pk=experiment_id).first()
    record = experiment.until_decided if experiment is not None else None
    if experiment is None or not record:
        return "not run until decided"
    if record.get("stop"):
        return "stopped already"
    if experiment.status != Experiment.Status.DONE:
        return f"no look while the experiment is {experiment.status}"
    repeats = int(experiment.repeats)
    if any(lk.get("repeats") == repeats for lk in record.get("looks", [])):
        return f"looked at {repeats} repeats already"
    runs = experiment_finished_runs(experiment=experiment)
    data = comparison_for_experiment(experiment=experiment)
    key = comparison_key(experiment=experiment, runs=runs)
    if not data or data.get("key") != key:
        return "no look: the stored comparison is not of the finished runs yet"
    plan = until_decided_plan(record)
    matrix = [r for r in runs if r.capacity_step is None]
    requests, _ = results_frames(runs=matrix)
    base_arm = str(data["baseline_arm"])
    derived, *_ = derive(requests, base_arm=base_arm, deadlines=experiment.deadlines)
    params = data.get("params") or {}
    intervals = primary_intervals(
        derived,
        base_arm=base_arm,
        endpoints=data["endpoints"],
        level=plan.level,
        n_boot=int(params.get("n_boot") or DEFAULT_N_BOOT),
        seed=int(params.get("seed") or 0),
    )
    spent = until_decided_spent(experiment=experiment)
    look, stop = look_decide(
        experiment=experiment, data=data, intervals=intervals, plan=plan, spent=spent, key=key
    )
    if stop is not None:
        done = until_decided_stop(experiment_id=experiment_id, repeats=repeats, look=look, stop=stop)
        return f"stopped: {stop['outcome']}" if done else "another loop recorded this look"
    added = until_decided_continue(experiment_id=experiment_id, repeats=repeats, look=look)
    return (
        f"added repeat {repeats + 1} ({len(added)} runs)"
        if added is not None
        else "another loop added the repeat"
    )


def look_decide(
    *,
    experiment: Experiment,
    data: dict[str, Any],
    intervals: dict[tuple[str, str], dict[str, Any]],
    plan: Plan,
    spent: Spent,
    key: str,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """This look's record and, when the rule stops, the stop's (None: continue). Every candidate
    arm x load is an endpoint; one without an interval (no promised-class request, too few for
    the statistic) is not measured at this look and decides nothing."""
    ends = data["endpoints"]
    floors = {
        (p["arm"], p["load"]): p.get("noise_floor")
        for p in data.get("primary") or []
        if p["metric"] == ends["primary_metric"] and p["stat"] == ends["primary_stat"]
    }
    arms = [a.label for a in experiment.arms.order_by("position") if not a.is_baseline]
    loads = [str(lv["label"]) for lv in experiment.load_levels]
    repeats = int(experiment.repeats)
    history = experiment.until_decided.get("looks", [])
    entries: list[dict[str, Any]] = []
    stops: list[tuple[dict[str, Any], Stop]] = []
    for arm in arms:
        for load in loads:
            res = intervals.get((arm, load)) or {}
            entry = {
                "arm": arm,
                "load": load,
                "delta": res.get("delta"),
                "lo": res.get("delta_lo"),
                "hi": res.get("delta_hi"),
                "noise_floor": floors.get((arm, load)),
                "n_requests": res.get("n_requests", 0),
                "measured": bool(res.get("measured")),
                "reason": res.get("reason") if res else "no pairs of the promised class at this load",
            }
            looks = [_look_of(lk, arm=arm, load=load) for lk in history] + [_look_entry(entry, repeats)]
            stop = stop_decide(looks, plan=plan, spent=spent)
            entries.append(entry | {"outcome": stop.outcome, "decided_at": stop.repeats})
            stops.append((entry, stop))
    overall = experiment_stop([s for _, s in stops]) if stops else Stop("undecided", repeats, "no endpoint")
    now = timezone.now().isoformat()
    look = {
        "repeats": repeats,
        "key": key,
        "level": plan.level,
        "at": now,
        "outcome": overall.outcome,
        "endpoints": entries,
    }
    if not overall.stopped:
        return json_safe(look), None
    record = {
        "outcome": overall.outcome,
        "repeats": repeats,
        "looks": len(history) + 1,
        "budget": budget_spent(plan, spent, repeats) if overall.outcome == "undecided" else None,
        "runs": spent.runs,
        "accelerator_hours": spent.accelerator_hours,
        "reason": overall.reason,
        "at": now,
        "endpoints": [_decided(entry, s, history) for entry, s in stops],
    }
    return json_safe(look), json_safe(record)


def _look_entry(entry: dict[str, Any], repeats: int) -> Look:
    return Look(
        repeats=repeats,
        delta=_number(entry.get("delta")),
        lo=_number(entry.get("lo")),
        hi=_number(entry.get("hi")),
        noise_floor=None if entry.get("noise_floor") is None else _number(entry["noise_floor"]),
    )


def _look_of(look: dict[str, Any], *, arm: str, load: str) -> Look:
    """One endpoint at an earlier look (not measured when that look lacked it)."""
    entry: dict[str, Any] = next(
        (e for e in look.get("endpoints", []) if e["arm"] == arm and e["load"] == load), {}
    )
    return _look_entry(entry, int(look["repeats"]))


def _decided(entry: dict[str, Any], stop: Stop, history: list[dict[str, Any]]) -> dict[str, Any]:
    """One endpoint in the stop record: its outcome, and the interval of the look that decided it
    (an endpoint decided at an earlier look keeps that look's interval)."""
    at = entry  # decided (or not) at this look
    earlier = next((lk for lk in history if int(lk["repeats"]) == stop.repeats), None)
    if earlier is not None:
        same = (
            e for e in earlier.get("endpoints", []) if e["arm"] == entry["arm"] and e["load"] == entry["load"]
        )
        at = next(same, entry)
    return {
        "arm": entry["arm"],
        "load": entry["load"],
        "outcome": stop.outcome,
        "repeats": stop.repeats,
        "delta": at.get("delta"),
        "lo": at.get("lo"),
        "hi": at.get("hi"),
        "noise_floor": at.get("noise_floor"),
    }
