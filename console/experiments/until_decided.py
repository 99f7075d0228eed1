"""Run until decided (issue 23): the experiment option, its validation, what an experiment has
spent, and the two writes of its loop: record a look that continues and add one repeat, or record
the stop. The stopping rule is :mod:`.sequential` (pure); the looks are computed by the analysis
app (``console.analysis.sequential_looks``: an interval needs the results, which sit above this
app), which calls :func:`until_decided_continue` or :func:`until_decided_stop` after each
comparison refresh.

The option, stored on ``Experiment.until_decided`` (``{}``: off). Declared by the user:

- ``max_repeats``: the most repeats, the first batch (``Experiment.repeats`` at definition)
  included; ``repeats`` then grows by one per look that continues;
- ``margin_s``: the equivalence margin in the primary endpoint's unit (seconds: the primary
  endpoint is a latency); null: no equivalence decision;
- ``max_runs``, ``max_accelerator_hours``: the budget (null: only ``max_repeats``).

Fixed at definition, before any run (the rule's guarantee needs them fixed): ``first_look`` (the
first batch), ``alpha`` (the endpoints' alpha), ``endpoints`` (m: candidate arms x loads),
``level`` (1 - alpha / (K m)), ``metric`` and ``stat`` (the declared primary endpoint). Written by
the loop: ``looks`` (one per repeat count looked at: ``repeats``, ``key`` (the comparison's),
``level``, ``at``, ``outcome``, ``endpoints``: per arm x load ``delta``/``lo``/``hi``/
``noise_floor`` in seconds and its ``outcome``) and, once it stops, ``stop`` (``outcome``,
``repeats``, ``looks``, ``budget`` (which budget ended it; null when decided), ``reason``, ``at``,
``endpoints``: each one's outcome and the look that decided it).

Capacity searches add repeats only: a repeat added here brings its own capacity searches (a search
runs per arm and repeat), and the rule never adds search steps (its endpoint is the declared
latency, not the capacity).
"""

from __future__ import annotations

import math
import os
from typing import Any, TypeGuard

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from console.experiments.capacity_search import EMBEDDED_QUEUE_ENV
from console.experiments.enqueue import run_enqueue
from console.experiments.matrix import load_levels_parse, output_buckets_parse
from console.experiments.matrix_runs import repeats_runs
from console.experiments.models import Experiment, Run
from console.experiments.scheduling import LOCKSTEP, lockstep_release
from console.experiments.sequential import Plan, Spent

FIELD = "until_decided"
KEYS = ("max_repeats", "margin_s", "max_runs", "max_accelerator_hours")
MAX_REPEATS = 50  # the rule's own bound (sequential.plan_problems)
MAX_RUNS = 1_000_000
MAX_HOURS = 1e6
MAX_MARGIN_S = 86_400.0  # a day: a latency margin beyond it is a typo


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def until_decided_clean(
    value: Any,
    *,
    repeats: Any,
    endpoints: Any,
    resolved: dict,
    arms: int,
    loads: int,
    buckets: int,
    errors: dict[str, list[str]],
) -> dict:
    """The option checked (messages under ``errors["until_decided"]``, each naming its field) and
    its plan fixed; ``{}`` = off. ``endpoints``: what the user declared (the primary endpoint
    must be among it); ``resolved``: those endpoints with the defaults; ``arms`` (the baseline
    included), ``loads`` and ``buckets``: the matrix's axes (m = candidate arms x loads)."""
    if value in (None, {}, ""):
        return {}
    n_endpoints = max(arms - 1, 1) * max(loads, 1)
    first_batch_runs = arms * loads * max(buckets, 1) * (repeats if _whole(repeats) else 0)
    if not isinstance(value, dict):
        errors[FIELD].append(
            'until_decided: a JSON object like {"max_repeats": 8, "margin_s": 0.005, "max_runs": 48}'
        )
        return {}
    problems = _values_check(value, repeats=repeats, first_batch_runs=first_batch_runs)
    if not (isinstance(endpoints, dict) and endpoints.get("primary_metric")):
        problems.append(
            "until_decided: declare the primary endpoint (endpoints.primary_metric and primary_stat): "
            "the rule decides on it"
        )
    max_repeats, margin = value.get("max_repeats"), value.get("margin_s")
    max_runs, hours = value.get("max_runs"), value.get("max_accelerator_hours")
    if problems or not _whole(repeats) or not _whole(max_repeats) or "alpha" not in resolved:
        errors[FIELD].extend(problems)
        return {}
    try:
        plan = Plan(
            max_repeats=max_repeats,
            first_look=repeats,
            alpha=float(resolved["alpha"]),
            margin=float(margin) if margin else None,  # 0: no equivalence decision
            endpoints=max(n_endpoints, 1),
            max_runs=max_runs,
            max_accelerator_hours=float(hours) if hours is not None else None,
        )
    except ValueError as exc:  # the rule's own checks (plan_problems), in its words
        errors[FIELD].append(f"until_decided: {exc}")
        return {}
    return {
        "max_repeats": plan.max_repeats,
        "margin_s": plan.margin,
        "max_runs": plan.max_runs,
        "max_accelerator_hours": plan.max_accelerator_hours,
        "first_look": plan.first_look,
        "alpha": plan.alpha,
        "endpoints": plan.endpoints,
        "level": plan.level,
        "metric": resolved["primary_metric"],
        "stat": resolved["primary_stat"],
        "looks": [],
    }


def _values_check(value: dict, *, repeats: Any, first_batch_runs: int) -> list[str]:
    """What is wrong with the option's own values, each message naming its field."""
    problems = [
        f"until_decided.{str(k)[:40]}: unknown key; use {', '.join(KEYS)}" for k in value if k not in KEYS
    ]
    max_repeats = value.get("max_repeats")
    if not _whole(max_repeats) or not 1 <= max_repeats <= MAX_REPEATS:
        problems.append(
            f"until_decided.max_repeats: a whole number from 1 to {MAX_REPEATS}, got {str(max_repeats)[:40]!r}"
        )
    elif _whole(repeats) and max_repeats < repeats:
        problems.append(
            f"until_decided.max_repeats: at least the first batch of repeats ({repeats}), got {max_repeats}"
        )
    margin = value.get("margin_s")
    if margin is not None and (not _finite(margin) or not 0 <= margin <= MAX_MARGIN_S):
        problems.append(
            f"until_decided.margin_s: seconds from 0 to {MAX_MARGIN_S:g}, got {str(margin)[:40]!r}"
        )
    max_runs = value.get("max_runs")
    if max_runs is not None and (not _whole(max_runs) or not 1 <= max_runs <= MAX_RUNS):
        problems.append(
            f"until_decided.max_runs: a whole number from 1 to {MAX_RUNS:,}, got {str(max_runs)[:40]!r}"
        )
    elif max_runs is not None and first_batch_runs > max_runs:
        problems.append(
            f"until_decided.max_runs: the first batch alone is {first_batch_runs} runs, more than {max_runs}"
        )
    hours = value.get("max_accelerator_hours")
    if hours is not None and (not _finite(hours) or not 0 < hours <= MAX_HOURS):
        problems.append(
            f"until_decided.max_accelerator_hours: a number above 0 and at most {MAX_HOURS:g}, got {str(hours)[:40]!r}"
        )
    return problems


def until_decided_declared(record: dict) -> dict:
    """The option as the user declared it (what a clone declares again)."""
    return {key: record[key] for key in KEYS if record.get(key) is not None}


def until_decided_plan(record: dict) -> Plan:
    """The plan an experiment fixed at definition (its ``until_decided`` option)."""
    return Plan(
        max_repeats=int(record["max_repeats"]),
        first_look=int(record["first_look"]),
        alpha=float(record["alpha"]),
        margin=record.get("margin_s"),
        endpoints=int(record["endpoints"]),
        max_runs=record.get("max_runs"),
        max_accelerator_hours=record.get("max_accelerator_hours"),
    )


def run_accelerators(run: Run) -> int:
    """The accelerators a run held: its recorded GPUs on the gpu queue, else 1 (a CPU host counts
    as one device; the same rule as the comparison's accelerator-hours,
    ``console.results.selectors.results_frames``)."""
    if run.queue != settings.GPU_QUEUE:
        return 1
    return len((run.hardware or {}).get("gpus") or []) or 1


def until_decided_spent(*, experiment: Experiment) -> Spent:
    """What the experiment has used (its runs, cancelled ones left out; accelerator-hours: each
    finished run's wall time in hours x its accelerators) and what one more repeat costs,
    estimated as the mean over the repeats so far."""
    runs = list(
        Run.objects.filter(experiment=experiment)
        .exclude(status=Run.Status.CANCELLED)
        .only("queue", "hardware", "wall_s")
    )
    hours = sum((r.wall_s or 0.0) * run_accelerators(r) for r in runs) / 3600.0
    repeats = max(int(experiment.repeats), 1)
    return Spent(
        runs=len(runs),
        accelerator_hours=hours,
        runs_per_repeat=math.ceil(len(runs) / repeats),
        accelerator_hours_per_repeat=hours / repeats,
    )


def until_decided_continue(*, experiment_id: int, repeats: int, look: dict) -> list[int] | None:
    """Record ``look`` (taken after ``repeats`` repeats), claim the next repeat and add its runs,
    sent once this transaction commits. The claim is one conditional UPDATE (``repeats`` from
    ``repeats`` to ``repeats + 1`` on a finished experiment that has not stopped): of two loops
    racing on the same look, one adds the repeat and the other (0 rows) does nothing. Returns
    the new runs' ids, or None when the claim was lost."""
    with transaction.atomic():
        experiment = Experiment.objects.filter(pk=experiment_id).first()
        if experiment is None or not experiment.until_decided:
            return None
        record = dict(experiment.until_decided)
        record["looks"] = [*record.get("looks", []), look]
        claimed = (
            Experiment.objects.filter(pk=experiment_id, repeats=repeats, status=Experiment.Status.DONE)
            .exclude(until_decided__has_key="stop")
            .update(
                repeats=repeats + 1, status=Experiment.Status.RUNNING, finished_at=None, until_decided=record
            )
        )
        if not claimed:
            return None
        experiment.refresh_from_db()
        arms = list(experiment.arms.select_related("config").order_by("position"))
        first = (Run.objects.filter(experiment=experiment).aggregate(m=Max("order"))["m"] or 0) + 1
        runs = Run.objects.bulk_create(
            repeats_runs(
                experiment=experiment,
                arm_rows=arms,
                levels=load_levels_parse(experiment.load_levels),
                buckets=output_buckets_parse(experiment.output_buckets or None),
                repeats=range(repeats, repeats + 1),
                first_order=first,
            )
        )
        _release(experiment=experiment, runs=runs)
    return [r.pk for r in runs]


def _release(*, experiment: Experiment, runs: list[Run]) -> None:
    """Send the added runs as ``experiment_start`` would: to an embedded worker's own queue when
    one runs this loop, one at a time for ``lockstep``, else all at once."""
    override = os.environ.get(EMBEDDED_QUEUE_ENV) or None
    if experiment.scheduling == LOCKSTEP and override is None:
        lockstep_release(experiment_id=experiment.pk)
        return
    for run in runs:
        run_enqueue(run=run, queue=override)


def until_decided_stop(*, experiment_id: int, repeats: int, look: dict, stop: dict) -> bool:
    """Record ``look`` and the ``stop`` it led to, once: False when the experiment has moved on
    (another repeat claimed) or already stopped."""
    with transaction.atomic():
        experiment = Experiment.objects.filter(pk=experiment_id).first()
        if experiment is None or not experiment.until_decided:
            return False
        record = dict(experiment.until_decided)
        record["looks"] = [*record.get("looks", []), look]
        record["stop"] = stop
        return bool(
            Experiment.objects.filter(pk=experiment_id, repeats=repeats)
            .exclude(until_decided__has_key="stop")
            .update(until_decided=record)
        )
