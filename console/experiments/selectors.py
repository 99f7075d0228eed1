"""Reads for experiments: progress, the run grid, lists."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from console.experiments.models import Experiment, Run
from console.experiments.sequential import DECIDED
from console.words import metric_words

TERMINAL = {Run.Status.DONE, Run.Status.FAILED, Run.Status.CANCELLED}


def experiment_request_count(*, experiment: Experiment) -> int:
    qs = experiment.trace.requests.all()
    if experiment.split != "all":
        qs = qs.filter(split=experiment.split)
    return qs.count()


@dataclass
class Progress:
    runs_total: int
    runs_done: int
    runs_failed: int
    runs_running: int
    requests_done: int
    requests_total: int
    fraction: float
    elapsed_s: float | None
    remaining_s: float | None

    def as_dict(self) -> dict:
        return self.__dict__.copy()


def experiment_progress(*, experiment: Experiment, runs: list[Run] | None = None) -> Progress:
    """Progress over every run, counting requests (a run of N requests weighs N).

    ``remaining_s`` extrapolates the elapsed wall time by the fraction done (seconds); None
    until something has finished.
    """
    runs = runs if runs is not None else list(experiment.runs.all())
    per_run = experiment_request_count(experiment=experiment)
    total = per_run * len(runs)
    done = 0
    for run in runs:
        if run.status in TERMINAL:
            done += per_run
        elif run.status == Run.Status.RUNNING:
            done += min(run.progress_done, per_run)
    fraction = done / total if total else 0.0
    elapsed = None
    remaining = None
    if experiment.started_at:
        end = experiment.finished_at if experiment.status not in ("running", "draft") else timezone.now()
        elapsed = ((end or timezone.now()) - experiment.started_at).total_seconds()
        if 0 < fraction < 1:
            remaining = elapsed * (1 - fraction) / fraction
        elif fraction >= 1:
            remaining = 0.0
    return Progress(
        runs_total=len(runs),
        runs_done=sum(r.status == Run.Status.DONE for r in runs),
        runs_failed=sum(r.status == Run.Status.FAILED for r in runs),
        runs_running=sum(r.status == Run.Status.RUNNING for r in runs),
        requests_done=done,
        requests_total=total,
        fraction=fraction,
        elapsed_s=elapsed,
        remaining_s=remaining,
    )


def experiment_grid(*, experiment: Experiment, runs: list[Run] | None = None) -> dict:
    """Runs arranged as arm rows x load columns (each cell lists its repeats)."""
    runs = runs if runs is not None else list(experiment.runs.select_related("arm"))
    arms = list(experiment.arms.select_related("config").order_by("position"))
    loads = [lv["label"] for lv in experiment.load_levels]
    cells: dict[tuple[int, str], list[Run]] = {}
    for run in sorted(runs, key=lambda r: r.repeat):
        cells.setdefault((run.arm_id, run.load_label), []).append(run)
    return {
        "loads": loads,
        "rows": [{"arm": arm, "cells": [cells.get((arm.pk, load), []) for load in loads]} for arm in arms],
    }


def experiment_status_payload(*, experiment: Experiment) -> dict:
    """The JSON the API and the CLI's progress bar read."""
    runs = list(experiment.runs.select_related("arm").order_by("order"))
    progress = experiment_progress(experiment=experiment, runs=runs)
    return {
        "id": experiment.pk,
        "name": experiment.name,
        "status": experiment.status,
        "trace": experiment.trace_id,
        "split": experiment.split,
        "engine": experiment.engine,
        "target_model": experiment.target_model,
        "arms": [
            {
                "label": a.label,
                "baseline": a.is_baseline,
                "config_hash": a.config.content_hash,
                "speculative_config": a.config.speculative_config,
            }
            for a in experiment.arms.select_related("config").order_by("position")
        ],
        "load_levels": experiment.load_levels,
        "output_buckets": experiment.output_buckets or [],
        "repeats": experiment.repeats,
        "until_decided": experiment.until_decided or None,
        "progress": progress.as_dict(),
        "runs": [
            {
                "id": r.pk,
                "order": r.order,
                "arm": r.arm.label,
                "load": r.load_label,
                "output_bucket": r.output_bucket,
                "repeat": r.repeat,
                "status": r.status,
                "progress_done": r.progress_done,
                "progress_total": r.progress_total,
                "error": r.error,
            }
            for r in runs
        ],
    }


def experiment_until_decided(*, experiment: Experiment) -> dict | None:
    """What the experiment page shows of a run-until-decided experiment (None: not one): its plan
    (``looks_max`` K, the primary endpoint in words), ``state`` (``"first look"`` before any,
    ``"continue"`` after a look that added a repeat, ``"stopped"``, ``"ended"``: cancelled or
    failed before it decided), the last look's endpoints and the stop with the endpoints it
    decided and those it left undecided. Every interval, floor and margin in seconds."""
    record = experiment.until_decided or {}
    if not record:
        return None
    looks = record.get("looks") or []
    stop = record.get("stop")
    state = "stopped" if stop else "continue" if looks else "first look"
    if not stop and experiment.status in (Experiment.Status.CANCELLED, Experiment.Status.FAILED):
        state = "ended"
    ends = experiment.endpoints or {}
    decided = [e for e in (stop or {}).get("endpoints", []) if e["outcome"] in DECIDED]
    return {
        "plan": record,
        "looks_max": int(record["max_repeats"]) - int(record["first_look"]) + 1,
        "metric_label": metric_words(record.get("metric"), record.get("stat")),
        "promised_class": ends.get("promised_class"),
        "state": state,
        "look_count": len(looks),
        "last_look": looks[-1] if looks else None,
        "stop": stop,
        "decided": decided,
        "undecided": [e for e in (stop or {}).get("endpoints", []) if e["outcome"] not in DECIDED],
    }
