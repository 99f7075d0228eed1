from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST, require_safe

from console.accounts.access import capability_required
from console.accounts.roles import RUN_EXPERIMENT
from console.experiments.forms import ExperimentForm
from console.experiments.models import Experiment, Run
from console.experiments.selectors import experiment_grid, experiment_progress
from console.experiments.services import (
    ExperimentInvalid,
    experiment_cancel,
    experiment_clone,
    experiment_create,
    experiment_start,
    run_retry,
    runs_reap_stale,
)

STALE_AFTER_S = 600.0  # progress is written every second or two while a run is alive


@require_safe
def experiment_list(request):
    experiments = Experiment.objects.select_related("trace", "created_by").prefetch_related("arms")
    return render(request, "experiments/list.html", {"experiments": experiments})


@capability_required(RUN_EXPERIMENT)
def experiment_new(request):
    form = ExperimentForm(request.POST or None, initial={"trace": request.GET.get("trace")})
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        start_now = data.pop("start_now")
        data["baseline_engine_args"] = data["baseline_engine_args"] or {}
        try:
            experiment = experiment_create(created_by=request.user, **data)
        except ExperimentInvalid as exc:
            form.add_service_errors(exc.errors)
        else:
            if start_now:
                experiment_start(experiment=experiment)
            messages.success(request, f"Experiment saved with {experiment.runs.count()} runs.")
            return redirect("experiments:detail", pk=experiment.pk)
    return render(request, "experiments/new.html", {"form": form})


@require_safe
def experiment_detail(request, pk: int):
    experiment = get_object_or_404(Experiment.objects.select_related("trace", "created_by"), pk=pk)
    return render(request, "experiments/detail.html", _detail_context(experiment))


@require_safe
def experiment_live(request, pk: int):
    """The part of the page htmx refreshes every 2 s while runs are going."""
    experiment = get_object_or_404(Experiment, pk=pk)
    return render(request, "experiments/_live.html", _detail_context(experiment))


def _detail_context(experiment: Experiment) -> dict:
    if experiment.status == Experiment.Status.RUNNING:
        runs_reap_stale(older_than_s=STALE_AFTER_S)
        experiment.refresh_from_db()
    runs = list(experiment.runs.select_related("arm").order_by("order"))
    return {
        "experiment": experiment,
        "grid": experiment_grid(experiment=experiment, runs=runs),
        "progress": experiment_progress(experiment=experiment, runs=runs),
        "runs": runs,
        "live": experiment.status in ("running",),
        "failed_runs": [r for r in runs if r.status == Run.Status.FAILED],
    }


@capability_required(RUN_EXPERIMENT)
@require_POST
def experiment_start_view(request, pk: int):
    experiment = get_object_or_404(Experiment, pk=pk)
    n = experiment_start(experiment=experiment)
    messages.info(request, f"Queued {n} runs." if n else "This experiment has already started.")
    return redirect("experiments:detail", pk=pk)


@capability_required(RUN_EXPERIMENT)
@require_POST
def experiment_cancel_view(request, pk: int):
    experiment = get_object_or_404(Experiment, pk=pk)
    result = experiment_cancel(experiment=experiment)
    messages.info(
        request,
        f"Cancelled {result['queued_cancelled']} queued runs; {result['running_stopping']} running run(s) stopping.",
    )
    return redirect("experiments:detail", pk=pk)


@capability_required(RUN_EXPERIMENT)
@require_POST
def run_retry_view(request, pk: int, run_pk: int):
    run = get_object_or_404(Run, pk=run_pk, experiment_id=pk)
    if run_retry(run=run):
        messages.info(request, f"Run {run.pk} queued again; its old results will be replaced.")
    else:
        messages.error(
            request, f"Run {run.pk} is {run.status}: only failed or cancelled runs can be retried."
        )
    return redirect("experiments:detail", pk=pk)


@capability_required(RUN_EXPERIMENT)
@require_POST
def experiment_clone_view(request, pk: int):
    experiment = get_object_or_404(Experiment, pk=pk)
    try:
        clone = experiment_clone(experiment=experiment, created_by=request.user)
    except ExperimentInvalid as exc:
        messages.error(request, f"Cannot clone: {exc}")
        return redirect("experiments:detail", pk=pk)
    messages.success(request, "Cloned as a draft: adjust nothing, or start it as it is.")
    return redirect("experiments:detail", pk=clone.pk)
