"""Writes for analysis: compute and store an experiment's comparison."""

from __future__ import annotations

from django.utils import timezone

from console.analysis.comparison.bootstrap import DEFAULT_N_BOOT
from console.analysis.comparison.schema import summary_load
from console.analysis.models import ComparisonCache
from console.analysis.selectors import (
    COMPARISON_STAGES,
    comparison_compute_for,
    comparison_key,
    experiment_finished_runs,
)
from console.experiments.models import Experiment


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
    (``console.analysis.fit.run_fit_stats``) and cache it in its ``RunSummary`` under "fit".
    None (nothing stored) for a candidate run or a run not done. Called by the worker when a
    run finishes and by :func:`comparison_refresh` for runs stored before it existed."""
    from console.analysis import fit
    from console.analysis.metrics import requests_derive
    from console.analysis.models import RunSummary, RunTelemetry
    from console.analysis.selectors import results_frames
    from console.experiments.models import Run
    from console.jsonutil import json_safe
    from console.traces.models import TraceRequest

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
        fit.run_fit_stats(
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
    from console.analysis.fit import FIT_VERSION
    from console.analysis.models import RunSummary

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


def results_pack_store(*, run_id: int) -> int:
    """Pack a finished run's result rows into one value (``RunResultsPack``), so comparisons
    load the run in one read. Returns the number of rows packed."""
    from console.analysis.frame_pack import frame_pack
    from console.analysis.models import RunResultsPack
    from console.analysis.selectors import (
        ARRAY_FIELDS,
        RESULT_FIELDS,
        RESULTS_PACK_VERSION,
        stored_results_frame,
    )

    frame = stored_results_frame(run_ids=[run_id])
    top = int(frame["result_id"].max()) if len(frame) else None
    blob = frame_pack(frame, arrays={RESULT_FIELDS[f]: kind for f, kind in ARRAY_FIELDS.items()})
    RunResultsPack.objects.update_or_create(
        run_id=run_id,
        defaults={"version": RESULTS_PACK_VERSION, "n_rows": len(frame), "max_result_id": top, "data": blob},
    )
    return len(frame)


def results_packs_store(*, experiment: Experiment) -> int:
    """Pack every finished run of ``experiment`` that has no pack of the current version, as the
    worker does for each run as it ends (``runs.run_finish``): for experiments whose rows were
    stored some other way (the bench's synthetic experiment, tests). Returns the runs packed."""
    from console.analysis.models import RunResultsPack
    from console.analysis.selectors import RESULTS_PACK_VERSION

    done = experiment.runs.filter(status="done").values_list("pk", flat=True)
    current = set(
        RunResultsPack.objects.filter(run_id__in=list(done), version=RESULTS_PACK_VERSION).values_list(
            "run_id", flat=True
        )
    )
    missing = [pk for pk in done if pk not in current]
    for pk in missing:
        results_pack_store(run_id=pk)
    return len(missing)
