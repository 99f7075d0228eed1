"""Capacity search as more runs: the option's validation, the first step of every search, and the
advance that adds the next step when one finishes (the bisection itself is pure:
``capacity_bisection.py``).

A search runs per arm and per repeat. Each step is an ordinary run (stored with its results)
with its own ``rate_multiplier``, ``capacity_step`` (1-based) and load label ``cap-<step>``.
When a step finishes, :func:`capacity_searches_advance` (called from
``runs.experiment_status_refresh``, so by the worker, the reaper and cancels alike) has its
SLO outcome evaluated from its stored results (by analysis, through ``hooks.py``: results and
metrics sit above experiments), stores that outcome on the run, and creates and enqueues the
next step, until the step budget or the bracket's resolution is reached. It holds the
experiment's row lock while it decides, and a unique constraint on (experiment, arm, repeat,
step) backs it: a retried or concurrent advance never adds two next steps for one finished step.
"""

from __future__ import annotations

import logging
import math
import os
from collections import defaultdict
from typing import Any

from django.db import transaction
from django.db.models import Max

from console.experiments.capacity_bisection import MIN_RATIO, next_multiplier
from console.experiments.enqueue import run_enqueue
from console.experiments.hooks import capacity_step_outcome
from console.experiments.models import Experiment, Run

log = logging.getLogger(__name__)

DEFAULT_LO = 0.25  # the bracket of rate multipliers a search bisects, unless the option says
DEFAULT_HI = 16.0
DEFAULT_STEPS = 5  # runs per search
MAX_STEPS = 8
MIN_MULTIPLIER = 1e-3
MAX_MULTIPLIER = 1e3
SLO_BOUNDS = ("attainment", "p95_tpot_s", "p95_e2e_s")  # ``capacity_stage.slo_evaluate`` checks each
SEARCH_KEYS = ("slo", "lo", "hi", "steps")
SLO_KEYS = ("traffic_class", *SLO_BOUNDS)
SLO_CLASSES = ("interactive", "batch", "all")
MAX_BOUND_S = 86_400.0  # a day: a latency bound beyond it is a typo
# The queue an embedded worker (``workers/embedded.py``) serves: a step it adds goes there too.
EMBEDDED_QUEUE_ENV = "SPECREVIEW_EMBEDDED_QUEUE"


def load_label(step: int) -> str:
    return f"cap-{step}"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def capacity_search_clean(
    value: Any, *, deadlines: dict, promised_class: str | None, errors: dict[str, list[str]]
) -> dict | None:
    """The ``capacity_search`` option, checked (messages under ``errors["capacity_search"]``,
    each naming its field) and with defaults filled in; None = off.

    ``{"slo": {"traffic_class": "interactive"|"batch"|"all" (default: the promised class),
    "attainment": fraction in (0, 1], "p95_tpot_s": seconds, "p95_e2e_s": seconds},
    "lo": 0.25, "hi": 16 (rate multipliers), "steps": 5 (1..8)}``; at least one SLO bound."""
    if value is None or value == {} or value == "":
        return None
    where = "capacity_search"
    problems: list[str] = []
    if not isinstance(value, dict):
        errors[where].append('capacity_search: a JSON object like {"slo": {"attainment": 0.99}, "lo": 0.25, "hi": 16, "steps": 5}')
        return None
    for key in value:
        if key not in SEARCH_KEYS:
            problems.append(f"capacity_search.{str(key)[:40]}: unknown key; use {', '.join(SEARCH_KEYS)}")
    slo_in = value.get("slo")
    slo: dict[str, Any] = {}
    if not isinstance(slo_in, dict):
        problems.append('capacity_search.slo: an object with at least one of "attainment", "p95_tpot_s", "p95_e2e_s"')
        slo_in = {}
    for key in slo_in:
        if key not in SLO_KEYS:
            problems.append(f"capacity_search.slo.{str(key)[:40]}: unknown key; use {', '.join(SLO_KEYS)}")
    cls = slo_in.get("traffic_class", promised_class or "interactive")
    if cls not in SLO_CLASSES:
        problems.append(f"capacity_search.slo.traffic_class: one of {', '.join(SLO_CLASSES)}, got {str(cls)[:40]!r}")
    slo["traffic_class"] = cls
    attainment = slo_in.get("attainment")
    if attainment is not None:
        if not _number(attainment) or not 0 < attainment <= 1:
            problems.append(f"capacity_search.slo.attainment: a fraction above 0 and at most 1, got {str(attainment)[:40]!r}")
        else:
            slo["attainment"] = float(attainment)
            limited = [c for c, d in (deadlines or {}).items() if d and (cls == "all" or c == cls)]
            if not limited:
                problems.append(
                    f"capacity_search.slo.attainment: the {cls} class has no deadline in this experiment's "
                    "deadlines, so every request would meet it; declare one or use a p95 bound"
                )
    for key in ("p95_tpot_s", "p95_e2e_s"):
        bound = slo_in.get(key)
        if bound is None:
            continue
        if not _number(bound) or not 0 < bound <= MAX_BOUND_S:
            problems.append(f"capacity_search.slo.{key}: seconds above 0 and at most {MAX_BOUND_S:g}, got {str(bound)[:40]!r}")
        else:
            slo[key] = float(bound)
    if isinstance(value.get("slo"), dict) and not any(slo_in.get(k) is not None for k in SLO_BOUNDS):
        problems.append("capacity_search.slo: give at least one bound: attainment, p95_tpot_s or p95_e2e_s")
    lo, hi = value.get("lo", DEFAULT_LO), value.get("hi", DEFAULT_HI)
    for key, x in (("lo", lo), ("hi", hi)):
        if not _number(x) or not MIN_MULTIPLIER <= x <= MAX_MULTIPLIER:
            problems.append(
                f"capacity_search.{key}: a rate multiplier between {MIN_MULTIPLIER:g} and {MAX_MULTIPLIER:g}, got {str(x)[:40]!r}"
            )
    if _number(lo) and _number(hi) and lo > 0 and not hi / lo > MIN_RATIO:
        problems.append(f"capacity_search: hi ({hi}) must be more than {MIN_RATIO}x lo ({lo})")
    steps = value.get("steps", DEFAULT_STEPS)
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        problems.append(f"capacity_search.steps: an integer from 1 to {MAX_STEPS}, got {str(steps)[:40]!r}")
    if problems:
        errors[where].extend(problems)
        return None
    return {"slo": slo, "lo": float(lo), "hi": float(hi), "steps": int(steps)}


def capacity_first_runs(*, experiment: Experiment, arms: list, repeats: int, first_order: int, queue_of) -> list[Run]:
    """Unsaved step-1 runs, one per arm and repeat, ordered after the matrix (arm order
    alternating per repeat, as the matrix does). ``queue_of(arm)`` gives an arm's queue."""
    search = experiment.capacity_search or {}
    mult = next_multiplier([], lo=search["lo"], hi=search["hi"], max_steps=search["steps"])
    if mult is None:  # a budget of at least one step always has a first one
        return []
    runs = []
    order = first_order
    for repeat in range(repeats):
        for arm in arms if repeat % 2 == 0 else list(reversed(arms)):
            runs.append(
                Run(
                    experiment=experiment,
                    arm=arm,
                    load_label=load_label(1),
                    rate_multiplier=mult,
                    repeat=repeat,
                    order=order,
                    queue=queue_of(arm),
                    config_hash=arm.config.content_hash,
                    capacity_step=1,
                )
            )
            order += 1
    return runs


def capacity_searches_advance(*, experiment_id: int) -> list[int]:
    """Add the next step of every search whose last step finished (``done``) and that is not
    over; returns the new runs' ids (enqueued once this transaction commits). Does nothing
    unless the experiment is running: a cancel stops every search. A search whose step failed
    or was cancelled stops there (the experiment then ends failed or cancelled)."""
    if not Experiment.objects.filter(
        pk=experiment_id, status=Experiment.Status.RUNNING, capacity_search__isnull=False
    ).exists():
        return []
    if not Run.objects.filter(
        experiment_id=experiment_id, capacity_step__isnull=False, status=Run.Status.DONE
    ).exists():
        return []
    created: list[int] = []
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=experiment_id)
        if experiment.status != Experiment.Status.RUNNING or not experiment.capacity_search:
            return []
        search = experiment.capacity_search
        groups: dict[tuple[int, int], list[Run]] = defaultdict(list)
        for run in Run.objects.filter(experiment=experiment, capacity_step__isnull=False).order_by("capacity_step"):
            groups[(run.arm_id, run.repeat)].append(run)
        next_order = (Run.objects.filter(experiment=experiment).aggregate(m=Max("order"))["m"] or 0) + 1
        override = os.environ.get(EMBEDDED_QUEUE_ENV) or None
        for (arm_id, repeat), steps in sorted(groups.items()):
            if any(r.status != Run.Status.DONE for r in steps):
                continue  # a step still to run, or the search ended on a failed/cancelled one
            outcomes = []
            for r in steps:
                if not r.capacity_outcome or r.capacity_outcome.get("attempt") != r.attempt:
                    r.capacity_outcome = capacity_step_outcome(
                        run=r, slo=search["slo"], deadlines=experiment.deadlines
                    ) | {"attempt": r.attempt}
                    Run.objects.filter(pk=r.pk).update(capacity_outcome=r.capacity_outcome)
                outcomes.append((r.rate_multiplier, bool(r.capacity_outcome["passed"])))
            mult = next_multiplier(outcomes, lo=search["lo"], hi=search["hi"], max_steps=search["steps"])
            if mult is None:
                continue
            last = steps[-1]
            step = (last.capacity_step or 0) + 1
            run = Run.objects.create(
                experiment=experiment,
                arm_id=arm_id,
                load_label=load_label(step),
                rate_multiplier=mult,
                repeat=repeat,
                order=next_order,
                queue=last.queue,
                config_hash=last.config_hash,
                capacity_step=step,
            )
            next_order += 1
            run_enqueue(run=run, queue=override)
            created.append(run.pk)
            log.info("experiment %s: capacity step %s of arm %s repeat %s at %.4gx", experiment_id, step, arm_id, repeat, mult)
    return created
