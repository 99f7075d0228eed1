"""Writes for experiments: define (validated), start, cancel, retry, clone."""

from __future__ import annotations

import datetime
import uuid
from collections import defaultdict
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from console.experiments.matrix import arm_label, config_hash, load_levels_parse, run_order, sweep_expand
from console.experiments.models import Arm, Experiment, Run, ServingConfig
from console.traces.models import Trace

SPLITS = ("all", "train", "holdout")
SAMPLING = ("trace", "greedy")
CLASSES = ("interactive", "batch")
DEFAULT_DEADLINES = {"interactive": {"e2e_s": 10.0, "ttft_s": 1.0}, "batch": {"e2e_s": 120.0}}


class ExperimentInvalid(Exception):
    """Field errors, as ``{field: [message, ...]}``; nothing was stored."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = dict(errors)
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in self.errors.items()))


def serving_config_validate(
    *, engine: str, target_model: str, engine_args: dict, speculative_config: dict | None
) -> list[str]:
    """Messages for everything wrong with a config, asking the engine itself (no model loaded)."""
    from workers.engines import ENGINE_KINDS, EngineConfig, EngineError, engine_class

    if engine not in ENGINE_KINDS:
        return [f"unknown engine {engine!r}; choose one of {', '.join(ENGINE_KINDS)}"]
    if not isinstance(engine_args, dict):
        return ["engine_args must be a JSON object"]
    if speculative_config is not None and not isinstance(speculative_config, dict):
        return ["speculative_config must be a JSON object or null"]
    if speculative_config is not None:
        # Checked for every engine, including servers whose config is only descriptive.
        if not speculative_config.get("method"):
            return [
                'speculative_config needs a "method" (ngram, draft_model, eagle, eagle3, mtp, suffix, ...)'
            ]
        k = speculative_config.get("num_speculative_tokens")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            return [f"num_speculative_tokens must be an integer >= 1, got {k!r}"]
        other = speculative_config.get("engine")
        if other is not None and other != engine:
            return [f"a candidate on engine {other!r} cannot be compared with a baseline on {engine!r}"]
    config = EngineConfig(
        engine=engine,
        target_model=target_model,
        engine_args=engine_args,
        speculative_config=speculative_config,
    )
    try:
        cls = engine_class(engine)
    except EngineError as exc:
        return [str(exc)]
    validate = getattr(cls, "validate", None)
    if validate is None:
        return []
    try:
        validate(config)
    except EngineError as exc:
        return [str(exc)]
    return []


def serving_config_get_or_create(
    *, name: str, engine: str, target_model: str, engine_args: dict, speculative_config: dict | None
) -> ServingConfig:
    digest = config_hash(
        engine=engine,
        target_model=target_model,
        engine_args=engine_args,
        speculative_config=speculative_config,
    )
    config, _ = ServingConfig.objects.get_or_create(
        content_hash=digest,
        defaults={
            "name": name,
            "engine": engine,
            "target_model": target_model,
            "engine_args": engine_args,
            "speculative_config": speculative_config,
        },
    )
    return config


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
        if cls not in CLASSES:
            errors["deadlines"].append(f"unknown traffic class {cls!r}; use {' or '.join(CLASSES)}")
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
    deadlines: dict | None = None,
    sampling: str = "trace",
    repeats: int = 3,
    warmup: int = 1,
    cost_per_hour_usd: float = 0.0,
    power_price_usd_per_kwh: float | None = None,
    created_by=None,
    notes: str = "",
) -> Experiment:
    """Validate and store an experiment, its configs (content-hashed) and its run matrix.

    ``candidates`` are ``{"speculative_config": {...}, "engine_args": {...}?, "label": str?}``;
    ``num_speculative_tokens`` may be a list (a sweep), expanded into one arm per value.
    Raises ExperimentInvalid with field errors (``candidates.0``, ``load_levels``...); nothing is stored then.
    """
    errors: dict[str, list[str]] = defaultdict(list)
    baseline_engine_args = baseline_engine_args or {}
    if not name.strip():
        errors["name"].append("give the experiment a name")
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
    clean_deadlines = _deadlines_clean(deadlines, errors)
    try:
        levels = load_levels_parse(load_levels)
    except (ValueError, TypeError) as exc:
        errors["load_levels"].append(str(exc))
        levels = []
    if not target_model or not str(target_model).strip():
        errors["target_model"].append("name the target model (a catalog name, a local folder or a GGUF path)")
    for message in serving_config_validate(
        engine=engine, target_model=target_model, engine_args=baseline_engine_args, speculative_config=None
    ):
        errors["baseline"].append(message)

    arms: list[tuple[str, dict, dict | None]] = [("baseline", baseline_engine_args, None)]
    spec: dict | None
    if not candidates:
        errors["candidates"].append("add at least one speculative candidate")
    for i, candidate in enumerate(candidates or []):
        field = f"candidates.{i}"
        if not isinstance(candidate, dict) or not isinstance(candidate.get("speculative_config"), dict):
            errors[field].append('each candidate needs a "speculative_config" object (vLLM keys)')
            continue
        if candidate.get("engine", engine) != engine:
            errors[field].append(
                f"candidate engine {candidate.get('engine')!r} differs from the baseline's {engine!r}: "
                "arms must run on the same engine to be comparable"
            )
            continue
        engine_args = {**baseline_engine_args, **candidate.get("engine_args", {})}
        try:
            expanded = sweep_expand(candidate["speculative_config"])
        except ValueError as exc:
            errors[field].append(str(exc))
            continue
        for spec in expanded:
            for message in serving_config_validate(
                engine=engine, target_model=target_model, engine_args=engine_args, speculative_config=spec
            ):
                errors[field].append(message)
            label = (
                str(candidate["label"]) if len(expanded) == 1 and candidate.get("label") else arm_label(spec)
            )
            arms.append((label, engine_args, spec))
    labels = [label for label, _, _ in arms]
    if len(set(labels)) != len(labels):
        errors["candidates"].append(
            f"two arms would be the same ({labels}): give them distinct configs or labels"
        )
    if trace is not None and split != "all" and not trace.requests.filter(split=split).exists():
        errors["split"].append(f"the trace has no requests in the {split!r} split")
    if errors:
        raise ExperimentInvalid(errors)

    with transaction.atomic():
        experiment = Experiment.objects.create(
            name=name.strip(),
            trace=trace,
            split=split,
            engine=engine,
            target_model=target_model,
            hardware_label=hardware_label,
            load_levels=[lv.as_dict() for lv in levels],
            output_limit=output_limit,
            deadlines=clean_deadlines,
            sampling=sampling,
            repeats=repeats,
            warmup=warmup,
            cost_per_hour_usd=float(cost_per_hour_usd),
            power_price_usd_per_kwh=power_price_usd_per_kwh,
            created_by=created_by,
            notes=notes,
        )
        arm_rows = []
        for position, (label, engine_args, spec) in enumerate(arms):
            config = serving_config_get_or_create(
                name=label,
                engine=engine,
                target_model=target_model,
                engine_args=engine_args,
                speculative_config=spec,
            )
            arm_rows.append(
                Arm.objects.create(
                    experiment=experiment,
                    config=config,
                    label=label,
                    position=position,
                    is_baseline=spec is None,
                )
            )
        Run.objects.bulk_create(
            Run(
                experiment=experiment,
                arm=arm_rows[a],
                load_label=levels[lv].label,
                rate_multiplier=levels[lv].rate_multiplier,
                concurrency_cap=levels[lv].concurrency,
                repeat=r,
                order=order,
                queue=run_queue(engine=engine, engine_args=arm_rows[a].config.engine_args),
                config_hash=arm_rows[a].config.content_hash,
            )
            for order, (a, lv, r) in enumerate(
                run_order(arms=len(arm_rows), loads=len(levels), repeats=repeats)
            )
        )
    return experiment


def run_queue(*, engine: str, engine_args: dict) -> str:
    """``gpu`` for engines on an accelerator, ``cpu`` otherwise (the hf engine's default)."""
    device = str(engine_args.get("device", "")).lower()
    if engine == "vllm":
        return "cpu" if device == "cpu" else "gpu"
    if engine == "hf":
        return "gpu" if device.startswith("cuda") else "cpu"
    return "cpu"


def _enqueue(run: Run) -> None:
    from workers.tasks import execute_run

    task_id = str(uuid.uuid4())
    Run.objects.filter(pk=run.pk).update(celery_task_id=task_id)
    transaction.on_commit(
        lambda: execute_run.apply_async(kwargs={"run_id": run.pk}, queue=run.queue, task_id=task_id)
    )


@transaction.atomic
def experiment_start(*, experiment: Experiment) -> int:
    """Queue every queued run, in the stored interleaved order. Returns how many were queued."""
    updated = Experiment.objects.filter(pk=experiment.pk, status=Experiment.Status.DRAFT).update(
        status=Experiment.Status.RUNNING, started_at=timezone.now()
    )
    if not updated:
        return 0
    runs = list(Run.objects.filter(experiment=experiment, status=Run.Status.QUEUED).order_by("order"))
    for run in runs:
        _enqueue(run)
    return len(runs)


@transaction.atomic
def experiment_cancel(*, experiment: Experiment) -> dict[str, int]:
    """Revoke queued runs and ask the running one to stop; no run stays ``running``.

    The running run sees ``cancel_requested`` within a second, stops the replay and the
    engine, deletes its partial results and marks itself cancelled.
    """
    from workers.celery import app

    queued = list(Run.objects.filter(experiment=experiment, status=Run.Status.QUEUED))
    for run in queued:
        if run.celery_task_id:
            app.control.revoke(run.celery_task_id)
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
def run_retry(*, run: Run) -> bool:
    """Queue a failed or cancelled run again; its old results are replaced when it runs."""
    updated = Run.objects.filter(pk=run.pk, status__in=[Run.Status.FAILED, Run.Status.CANCELLED]).update(
        status=Run.Status.QUEUED, error="", cancel_requested=False, progress_done=0, finished_at=None
    )
    if not updated:
        return False
    Experiment.objects.filter(pk=run.experiment_id).update(status=Experiment.Status.RUNNING, finished_at=None)
    run.refresh_from_db()
    _enqueue(run)
    return True


def experiment_status_refresh(*, experiment_id: int) -> str:
    """Derive the experiment's status from its runs once none is left to run."""
    statuses = set(Run.objects.filter(experiment_id=experiment_id).values_list("status", flat=True))
    if statuses & {Run.Status.QUEUED, Run.Status.RUNNING}:
        return Experiment.Status.RUNNING
    if Run.Status.FAILED in statuses:
        status = Experiment.Status.FAILED
    elif Run.Status.CANCELLED in statuses:
        status = Experiment.Status.CANCELLED
    else:
        status = Experiment.Status.DONE
    Experiment.objects.filter(pk=experiment_id).update(status=status, finished_at=timezone.now())
    return status


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
    return experiment_create(
        name=name or f"{experiment.name} (copy)",
        trace=experiment.trace,
        target_model=experiment.target_model,
        engine=experiment.engine,
        baseline_engine_args=baseline.config.engine_args,
        candidates=candidates,
        load_levels=experiment.load_levels,
        split=experiment.split,
        hardware_label=experiment.hardware_label,
        output_limit=experiment.output_limit,
        deadlines=experiment.deadlines,
        sampling=experiment.sampling,
        repeats=experiment.repeats,
        warmup=experiment.warmup,
        cost_per_hour_usd=experiment.cost_per_hour_usd,
        power_price_usd_per_kwh=experiment.power_price_usd_per_kwh,
        created_by=created_by,
        notes=experiment.notes,
    )


def run_progress_record(*, run_id: int, done: int, total: int) -> bool:
    """Store progress; returns True when the run has been asked to stop."""
    Run.objects.filter(pk=run_id).update(progress_done=done, progress_total=total, progress_at=timezone.now())
    return Run.objects.filter(pk=run_id, cancel_requested=True).exists()


def run_claim(*, run_id: int, worker: str) -> bool:
    """queued -> running, once: a redelivered or revoked task finds nothing to claim."""
    return bool(
        Run.objects.filter(pk=run_id, status=Run.Status.QUEUED, cancel_requested=False).update(
            status=Run.Status.RUNNING,
            started_at=timezone.now(),
            worker=worker,
            attempt=F("attempt") + 1,
            progress_done=0,
            error="",
        )
    )


def runs_reap_stale(*, older_than_s: float = 600.0) -> int:
    """Fail runs left ``running`` by a worker that died (no progress for ``older_than_s`` seconds).

    Progress is written at least every 2 s while a run is alive, so a long silence means the
    worker is gone; the run can then be retried alone.
    """
    cutoff = timezone.now() - datetime.timedelta(seconds=older_than_s)
    stale = Run.objects.filter(status=Run.Status.RUNNING, progress_at__lt=cutoff) | Run.objects.filter(
        status=Run.Status.RUNNING, progress_at__isnull=True, started_at__lt=cutoff
    )
    experiment_ids = set(stale.values_list("experiment_id", flat=True))
    n = stale.update(
        status=Run.Status.FAILED,
        finished_at=timezone.now(),
        error=f"worker lost: no progress for more than {older_than_s:.0f} s; retry the run",
    )
    for experiment_id in experiment_ids:
        experiment_status_refresh(experiment_id=experiment_id)
    return n
