"""Writes for experiments: define (validated), start, cancel, clone (the arms: arms.py; a run's own
life: runs.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection
from typing import Any

from celery import current_app
from django.db import transaction
from django.utils import timezone

from console.experiments.arms import arms_resolve, arms_store
from console.experiments.capacity_search import capacity_search_clean
from console.experiments.endpoints import EndpointError, endpoints_resolve
from console.experiments.enqueue import run_enqueue
from console.experiments.matrix import (
    OutputBucket,
    bucket_of,
    load_levels_parse,
    output_buckets_parse,
    recorded_output_tokens,
)
from console.experiments.matrix_runs import repeats_runs
from console.experiments.matrix_runs import (
    run_queue as run_queue,  # named here by settings.py and the vllm docs
)
from console.experiments.models import Experiment, Run
from console.experiments.runs import experiment_status_refresh
from console.experiments.scheduling import LOCKSTEP, lockstep_release, scheduling_check
from console.experiments.until_decided import until_decided_clean, until_decided_declared
from console.traces.models import RAW_TEXT_PURGED_KEY, TRAFFIC_CLASSES, Trace

SPLITS = ("all", "train", "holdout")
SAMPLING = ("trace", "greedy")
DEFAULT_DEADLINES = {"interactive": {"e2e_s": 10.0, "ttft_s": 1.0}, "batch": {"e2e_s": 120.0}}


class ExperimentInvalid(Exception):
    """Field errors, as ``{field: [message, ...]}``; nothing was stored."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = dict(errors)
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in self.errors.items()))


def _deadlines_clean(deadlines: Any, errors: dict[str, list[str]]) -> dict:
    if deadlines in (None, ""):
        return DEFAULT_DEADLINES
    if not isinstance(deadlines, dict):
        errors["deadlines"].append(
            'deadlines must be an object like {"interactive": {"e2e_s": 10, "ttft_s": 1}}'
        )
        return {}
    clean: dict[str, dict[str, float]] = {}
    for cls, limits in deadlines.items():
        if cls not in TRAFFIC_CLASSES:
            errors["deadlines"].append(f"unknown traffic class {cls!r}; use {' or '.join(TRAFFIC_CLASSES)}")
            continue
        if not isinstance(limits, dict):
            errors["deadlines"].append(f"{cls}: limits must be an object with e2e_s and/or ttft_s")
            continue
        clean[cls] = {}
        for key, value in limits.items():
            if key not in ("e2e_s", "ttft_s", "tpot_s"):
                errors["deadlines"].append(f"{cls}.{key}: unknown limit; use e2e_s, ttft_s or tpot_s")
            elif isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                errors["deadlines"].append(f"{cls}.{key}: must be a number of seconds > 0, got {value!r}")
            else:
                clean[cls][key] = float(value)
    return clean


def _endpoints_clean(endpoints: Any, errors: dict[str, list[str]]) -> dict:
    """The declared endpoints, resolved against the defaults and checked (field errors under
    ``endpoints``)."""
    if endpoints is not None and not isinstance(endpoints, dict):
        errors["endpoints"].append("endpoints must be a JSON object")
        return {}
    try:
        resolved = dict(endpoints_resolve(endpoints))
    except EndpointError as exc:
        errors["endpoints"].append(str(exc))
        return {}
    if resolved["promised_class"] not in TRAFFIC_CLASSES:
        errors["endpoints"].append(
            f"endpoints.promised_class: one of {', '.join(TRAFFIC_CLASSES)}, got {resolved['promised_class']!r}"
        )
    return resolved


def experiment_create(
    *,
    name: str,
    trace: Trace,
    target_model: str,
    engine: str = "hf",
    baseline_engine_args: dict | None = None,
    candidates: list[dict],
    load_levels: str | list = "1x",
    split: str = "all",
    hardware_label: str = "",
    output_limit: int | None = None,
    output_buckets: str | list | None = None,
    deadlines: dict | None = None,
    sampling: str = "trace",
    repeats: int = 3,
    warmup: int = 1,
    cost_per_hour_usd: float = 0.0,
    power_price_usd_per_kwh: float | None = None,
    endpoints: dict | None = None,
    capacity_search: dict | None = None,
    scheduling: str = "parallel",
    until_decided: dict | None = None,
    created_by=None,
    notes: str = "",
) -> Experiment:
    """Validate and store an experiment, its configs (content-hashed) and its run matrix.

    ``candidates`` are ``{"speculative_config": {...}, "engine_args": {...}?, "label": str?}``;
    ``num_speculative_tokens`` may be a list (a sweep), expanded into one arm per value; a
    ``speculative_config`` of null (with a label) is an A/A arm: the baseline's config again.
    ``endpoints`` are declared before the run (``console.experiments.endpoints``): the promised
    traffic class, the primary latency metric and statistic, the success metric, alpha; the gate
    judges those only.
    ``output_buckets`` (``matrix.output_buckets_parse``: ``"0:64,64:256,256:1024"``) makes the
    matrix arms x loads x buckets: each bucket's runs replay the requests whose recorded output
    length is in it, with ``max_tokens`` capped at its own limit. None or empty: no buckets.
    ``capacity_search`` (``capacity_search.capacity_search_clean``; None = off) adds a capacity search
    per arm and repeat after the matrix: its steps are more runs, added one by one as each finishes.
    ``until_decided`` (``until_decided.until_decided_clean``; None = off) makes ``repeats`` the first
    batch: one repeat is added at a time until the primary endpoint is decided or the budget spent.
    Raises ExperimentInvalid with field errors (``candidates.0``, ``load_levels``...); nothing is stored then.

    Long because: its options are the public contract (the form and the API pass them through), each
    said here; the body calls one check per option, then stores the experiment, its arms and runs.
    """
    errors: dict[str, list[str]] = defaultdict(list)
    baseline_engine_args = baseline_engine_args or {}
    _fields_check(
        name=name, target_model=target_model, hardware_label=hardware_label, split=split, sampling=sampling,
        repeats=repeats, warmup=warmup, output_limit=output_limit, cost_per_hour_usd=cost_per_hour_usd,
        power_price_usd_per_kwh=power_price_usd_per_kwh, errors=errors,
    )
    buckets = _parsed(output_buckets_parse, output_buckets, field="output_buckets", errors=errors)
    clean_deadlines = _deadlines_clean(deadlines, errors)
    clean_endpoints = _endpoints_clean(endpoints, errors)
    clean_search = capacity_search_clean(
        capacity_search, deadlines=clean_deadlines, promised_class=clean_endpoints.get("promised_class"), errors=errors
    )
    levels = _parsed(load_levels_parse, load_levels, field="load_levels", errors=errors)
    arms = arms_resolve(
        engine=engine, target_model=target_model, baseline_engine_args=baseline_engine_args, candidates=candidates,
        errors=errors,
    )
    _trace_check(trace=trace, split=split, buckets=buckets, errors=errors)
    scheduling_check(scheduling, errors=errors)
    clean_until = until_decided_clean(
        until_decided, repeats=repeats, endpoints=endpoints, resolved=clean_endpoints, arms=len(arms),
        loads=len(levels), buckets=len(buckets), errors=errors,
    )
    if errors:
        raise ExperimentInvalid(errors)

    with transaction.atomic():
        experiment = Experiment.objects.create(
            name=name.strip(), trace=trace, split=split, engine=engine, target_model=target_model,
            hardware_label=hardware_label, notes=notes, created_by=created_by,
            load_levels=[lv.as_dict() for lv in levels], output_buckets=[b.as_dict() for b in buckets],
            output_limit=output_limit, sampling=sampling, repeats=repeats, warmup=warmup,
            deadlines=clean_deadlines, endpoints=clean_endpoints, capacity_search=clean_search,
            cost_per_hour_usd=float(cost_per_hour_usd), power_price_usd_per_kwh=power_price_usd_per_kwh,
            scheduling=scheduling, until_decided=clean_until,
        )
        arm_rows = arms_store(experiment=experiment, arms=arms, engine=engine, target_model=target_model)
        Run.objects.bulk_create(repeats_runs(
            experiment=experiment, arm_rows=arm_rows, levels=levels, buckets=buckets, repeats=range(repeats), first_order=0
        ))
    return experiment


def _fields_check(
    *, name: str, target_model: str, hardware_label: str, split: str, sampling: str, repeats: int, warmup: int,
    output_limit: int | None, cost_per_hour_usd: float, power_price_usd_per_kwh: float | None,
    errors: dict[str, list[str]],
) -> None:
    """The experiment's own scalar fields (names, split, sampling, counts, prices): problems go
    into ``errors`` under each field's name."""
    if not name.strip():
        errors["name"].append("give the experiment a name")
    for key, text, limit in (("name", name.strip(), 200), ("target_model", str(target_model or ""), 500)):
        if len(text) > limit:  # the columns' lengths: a clear error, never a database one
            errors[key].append(f"at most {limit} characters, got {len(text)}")
    if len(hardware_label or "") > 200:
        errors["hardware_label"].append(f"at most 200 characters, got {len(hardware_label)}")
    if split not in SPLITS:
        errors["split"].append(f"split must be one of {', '.join(SPLITS)}")
    if sampling not in SAMPLING:
        errors["sampling"].append("sampling must be 'trace' (keep each request's) or 'greedy'")
    if not isinstance(repeats, int) or repeats < 1:
        errors["repeats"].append("repeats must be an integer >= 1")
    if not isinstance(warmup, int) or warmup < 0:
        errors["warmup"].append("warm-up count must be an integer >= 0")
    if output_limit is not None and (not isinstance(output_limit, int) or output_limit < 1):
        errors["output_limit"].append("output limit must be an integer >= 1 (tokens)")
    if not isinstance(cost_per_hour_usd, int | float) or cost_per_hour_usd < 0:
        errors["cost_per_hour_usd"].append("cost per accelerator-hour must be a number >= 0 (USD)")
    if power_price_usd_per_kwh is not None and (
        not isinstance(power_price_usd_per_kwh, int | float) or power_price_usd_per_kwh < 0
    ):
        errors["power_price_usd_per_kwh"].append("power price must be a number >= 0 (USD per kWh)")


def _parsed(parse: Callable[[Any], list], value: Any, *, field: str, errors: dict[str, list[str]]) -> list:
    """``parse(value)``, or [] with its message under ``field``."""
    try:
        return parse(value)
    except (ValueError, TypeError) as exc:
        errors[field].append(str(exc))
        return []


def _trace_check(*, trace: Trace, split: str, buckets: list[OutputBucket], errors: dict[str, list[str]]) -> None:
    """The trace has requests in ``split``, and every bucket holds one of them: an empty one would
    run nothing. A trace with multi-turn sessions is refused buckets: a bucket would cut a
    conversation between turns (a later turn replays after its own previous turn, which another
    bucket's run would hold)."""
    if trace is None:
        return
    purged = (trace.metadata or {}).get(RAW_TEXT_PURGED_KEY)
    if purged:
        on = purged.get("on", "") if isinstance(purged, dict) else ""
        errors["trace"].append(
            f"the trace's prompts were purged{' on ' + on if on else ''} after its retention period, so it "
            "cannot be replayed: import the file again (a new trace) to run it"
        )
        return
    if split != "all" and not trace.requests.filter(split=split).exists():
        errors["split"].append(f"the trace has no requests in the {split!r} split")
        return
    if not buckets:
        return
    qs = trace.requests.all() if split == "all" else trace.requests.filter(split=split)
    if qs.filter(turn__gt=0).exists():
        errors["output_buckets"].append(
            "output buckets need single-turn requests: this trace has multi-turn sessions, and a bucket "
            "would split a conversation between its turns"
        )
        return
    counts = dict.fromkeys((b.label for b in buckets), 0)
    for max_tokens, metadata in qs.values_list("max_tokens", "metadata").iterator():
        bucket = bucket_of(recorded_output_tokens(max_tokens=max_tokens, metadata=metadata), buckets)
        if bucket is not None:
            counts[bucket.label] += 1
    for i, bucket in enumerate(buckets, start=1):
        if not counts[bucket.label]:
            where = "" if split == "all" else f" in the {split!r} split"
            errors["output_buckets"].append(
                f"output bucket {i} ({bucket.label} tokens): no request of the trace{where} has a recorded "
                "output length in it"
            )


@transaction.atomic
def experiment_start(*, experiment: Experiment, queue: str | None = None) -> int:
    """Queue every queued run (``lockstep``: the first), in the stored order. Returns how many.

    ``queue`` overrides each run's own queue: a worker started for this one experiment
    (``workers/embedded.py``) listens on a queue of its own, so it serves these runs only.
    """
    updated = Experiment.objects.filter(pk=experiment.pk, status=Experiment.Status.DRAFT).update(
        status=Experiment.Status.RUNNING, started_at=timezone.now()
    )
    if not updated:
        return 0
    if experiment.scheduling == LOCKSTEP and queue is None:
        return lockstep_release(experiment_id=experiment.pk)  # the first run; the rest as each ends
    runs = list(Run.objects.filter(experiment=experiment, status=Run.Status.QUEUED).order_by("order"))
    for run in runs:
        run_enqueue(run=run, queue=queue)
    return len(runs)


@transaction.atomic
def experiment_cancel(*, experiment: Experiment) -> dict[str, int]:
    """Revoke queued runs and ask the running one to stop; no run stays ``running``.

    The running run's worker sees ``cancel_requested`` at its next heartbeat, stops the replay
    and the engine, deletes its partial results and marks itself cancelled; if that worker is
    gone, the reaper cancels the run.
    """
    queued = list(Run.objects.filter(experiment=experiment, status=Run.Status.QUEUED))
    for run in queued:
        if run.celery_task_id:
            current_app.control.revoke(run.celery_task_id)
    n_queued = Run.objects.filter(experiment=experiment, status=Run.Status.QUEUED).update(
        status=Run.Status.CANCELLED, cancel_requested=True, finished_at=timezone.now()
    )
    n_running = Run.objects.filter(experiment=experiment, status=Run.Status.RUNNING).update(
        cancel_requested=True
    )
    Experiment.objects.filter(pk=experiment.pk).exclude(
        status__in=[Experiment.Status.DONE, Experiment.Status.FAILED]
    ).update(status=Experiment.Status.CANCELLED, finished_at=timezone.now())
    return {"queued_cancelled": n_queued, "running_stopping": n_running}


@transaction.atomic
def experiment_runs_cancel_leftover(
    *, reason: str, experiment_ids: Collection[int] | None = None, stop_running: bool = True
) -> dict[int, int]:
    """Cancel the unfinished runs of running experiments (all of them, or ``experiment_ids``),
    writing ``reason`` into each run's error. Returns {experiment id: runs cancelled}.

    Queued runs end ``cancelled`` at once (a message still in a broker then finds nothing to
    claim). With ``stop_running`` a ``running`` run ends ``cancelled`` too: for runs whose
    worker is gone (an interrupted demo, a worker that was stopped); without it the run is
    only asked to stop (``cancel_requested``) and its worker ends it ``cancelled`` within a
    second or so, keeping the reason.
    """
    experiments = Experiment.objects.filter(status=Experiment.Status.RUNNING)
    if experiment_ids is not None:
        experiments = experiments.filter(pk__in=list(experiment_ids))
    unfinished = Run.objects.filter(experiment__in=experiments)
    now = timezone.now()
    counts: dict[int, int] = defaultdict(int)
    statuses = [Run.Status.QUEUED, Run.Status.RUNNING] if stop_running else [Run.Status.QUEUED]
    ending = unfinished.filter(status__in=statuses)
    for experiment_id in ending.values_list("experiment_id", flat=True):
        counts[experiment_id] += 1
    ending.update(status=Run.Status.CANCELLED, cancel_requested=True, error=reason, finished_at=now)
    if not stop_running:  # a run already asked to stop keeps the first reason
        stopping = unfinished.filter(status=Run.Status.RUNNING, cancel_requested=False)
        for experiment_id in stopping.values_list("experiment_id", flat=True):
            counts[experiment_id] += 1
        stopping.update(cancel_requested=True, error=reason)
    for experiment_id in counts:
        experiment_status_refresh(experiment_id=experiment_id)
    return dict(counts)


def experiment_clone(*, experiment: Experiment, created_by=None, name: str | None = None) -> Experiment:
    """A new draft with the same trace, configs and parameters (a started experiment is immutable)."""
    arms = list(experiment.arms.select_related("config"))
    baseline = next(a for a in arms if a.is_baseline)
    candidates = [
        {
            "label": a.label,
            "speculative_config": a.config.speculative_config,
            "engine_args": a.config.engine_args,
        }
        for a in arms
        if not a.is_baseline
    ]
    plan = experiment.until_decided or {}  # the declared plan again: its first batch, not the repeats it grew to
    return experiment_create(
        name=name or f"{experiment.name} (copy)", trace=experiment.trace, target_model=experiment.target_model,
        engine=experiment.engine, baseline_engine_args=baseline.config.engine_args, candidates=candidates,
        load_levels=experiment.load_levels, split=experiment.split, hardware_label=experiment.hardware_label,
        output_limit=experiment.output_limit, output_buckets=experiment.output_buckets,
        deadlines=experiment.deadlines, sampling=experiment.sampling, repeats=plan.get("first_look", experiment.repeats),
        warmup=experiment.warmup, cost_per_hour_usd=experiment.cost_per_hour_usd,
        power_price_usd_per_kwh=experiment.power_price_usd_per_kwh, capacity_search=experiment.capacity_search,
        created_by=created_by, notes=experiment.notes,
        **({"endpoints": experiment.endpoints, "until_decided": until_decided_declared(plan)} if plan else {}),
    )
