"""Writes for analysis: compute and store an experiment's comparison, and cache each finished
baseline run's fit facts."""

from __future__ import annotations

from django.utils import timezone

from console.analysis.comparison.bootstrap import DEFAULT_N_BOOT
from console.analysis.comparison.schema import summary_load
from console.analysis.fit_stats import FIT_VERSION, run_fit_stats
from console.analysis.metrics import requests_derive
from console.analysis.models import ComparisonCache
from console.analysis.selectors import (
    COMPARISON_STAGES,
    comparison_compute_for,
    comparison_key,
    experiment_finished_runs,
)
from console.experiments.models import Experiment, Run
from console.jsonutil import json_safe
from console.results.models import RunSummary, RunTelemetry
from console.results.selectors import results_frames
from console.traces.models import TraceRequest


def comparison_refresh(
    *, experiment_id: int, n_boot: int = DEFAULT_N_BOOT, force: bool = False
) -> dict | None:
    """Compute the experiment's comparison from its finished runs and store it; skipped when the
    stored one is already current (unless ``force``). None when no baseline run finished yet.
    Called by the ``workers.compute_comparison`` task when an experiment's last run ends, by the
    demo and by ``manage.py compute_comparison``."""
    experiment = Experiment.objects.get(pk=experiment_id)
    runs = experiment_finished_runs(experiment=experiment)
    if not any(r.arm.is_baseline for r in runs):
        return None
    fit_runs_summarise(experiment=experiment)
    key = comparison_key(experiment=experiment, runs=runs)
    cached = ComparisonCache.objects.filter(experiment=experiment).only("key", "data").first()
    if cached is not None and cached.key == key and cached.data and not force:
        return cached.data
    started = timezone.now().isoformat()

    def report(stage: str) -> None:
        # Written in its own statement (the task holds no transaction): pages read it at once.
        step = COMPARISON_STAGES.index(stage) + 1
        progress = {
            "key": key,
            "stage": stage,
            "step": step,
            "steps": len(COMPARISON_STAGES),
            "started_at": started,
        }
        ComparisonCache.objects.update_or_create(experiment=experiment, defaults={"progress": progress})

    try:
        data = comparison_compute_for(experiment=experiment, runs=runs, n_boot=n_boot, progress=report)
        report(COMPARISON_STAGES[-1])
        data["key"] = key
        summary_load(data)  # what is stored is what every reader can load
    finally:
        ComparisonCache.objects.filter(experiment=experiment).update(progress={})
    ComparisonCache.objects.update_or_create(
        experiment=experiment, defaults={"key": key, "data": data, "progress": {}}
    )
    return data


def fit_run_summarise(*, run_id: int) -> dict | None:
    """Reduce one finished baseline run's stored results to what the fit assessment reads
    (``console.analysis.fit_stats.run_fit_stats``) and cache it in its ``RunSummary`` under "fit".
    None (nothing stored) for a candidate run or a run not done. Called as each run finishes
    (registered in ``apps.py`` with ``console.experiments.hooks``) and by
    :func:`comparison_refresh` for runs stored before it existed."""
    run = Run.objects.select_related("arm", "experiment").filter(pk=run_id).first()
    if run is None or run.status != Run.Status.DONE or not run.arm.is_baseline:
        return None
    requests, _ = results_frames(runs=[run])
    derived = requests_derive(requests, deadlines=run.experiment.deadlines)
    metadata = dict(TraceRequest.objects.filter(results__run_id=run.pk).values_list("request_id", "metadata"))
    tele = (
        RunTelemetry.objects.filter(run_id=run.pk)
        .values("mean_util", "gpu_peak_memory_bytes", "counters")
        .first()
    )
    stats = json_safe(
        run_fit_stats(
            derived,
            metadata=metadata,
            telemetry=tele,
            hardware=run.hardware,
            run={
                "load": run.load_label,
                "rate_multiplier": run.rate_multiplier,
                "concurrency_cap": run.concurrency_cap,
                "repeat": run.repeat,
            },
        )
    )
    summary, _ = RunSummary.objects.get_or_create(run_id=run.pk)
    summary.data = {**(summary.data or {}), "fit": stats}
    summary.save(update_fields=["data", "computed_at"])
    return stats


def fit_runs_summarise(*, experiment: Experiment) -> int:
    """Cache the fit facts of every finished baseline run that has none (or an older version)."""
    runs = experiment.runs.filter(status="done", arm__is_baseline=True).values_list("pk", flat=True)
    current = {
        run_id
        for run_id, data in RunSummary.objects.filter(run_id__in=list(runs)).values_list("run_id", "data")
        if ((data or {}).get("fit") or {}).get("version") == FIT_VERSION
    }
    missing = [pk for pk in runs if pk not in current]
    for pk in missing:
        fit_run_summarise(run_id=pk)
    return len(missing)
