from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from console.accounts import teams
from console.accounts.access import act_required, capability_required
from console.accounts.roles import RUN_EXPERIMENT
from console.experiments.forms import ExperimentForm
from console.experiments.models import Experiment, Run
from console.experiments.runs import run_retry
from console.experiments.selectors import experiment_grid, experiment_progress, experiment_until_decided
from console.experiments.services import (
    ExperimentInvalid,
    experiment_cancel,
    experiment_clone,
    experiment_create,
    experiment_start,
)
from console.listing import listing


@require_safe
def experiment_list(request):
    experiments = listing(
        request,
        teams.visible(Experiment.objects.select_related("trace__team", "created_by").prefetch_related("arms"), request.user),
        sorts={
            "name": "name",
            "status": "status",
            "trace": "trace__name",
            "by": "created_by__username",
            "created": "created_at",
        },
        default="-created",
    )
    return render(request, "experiments/list.html", {"experiments": experiments})


@capability_required(RUN_EXPERIMENT)
@require_http_methods(["GET", "POST"])
def experiment_new(request):
    form = ExperimentForm(request.POST or None, initial={"trace": request.GET.get("trace")}, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        start_now = data.pop("start_now")
        for key in ("promised_class", "primary_metric", "success_metric"):
            data.pop(key)
        data["endpoints"] = form.endpoints()
        for key in form.CAPACITY_FIELDS:
            data.pop(key)
        data["capacity_search"] = form.capacity_search_value()
        for key in form.UNTIL_FIELDS:
            data.pop(key)
        data["until_decided"] = form.until_decided_value()
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
    experiment = teams.visible_get(Experiment.objects.select_related("trace", "created_by"), request.user, pk=pk)
    # The fit-assessment block is filled in by the analysis app's ``experiment_fit`` tag.
    return render(request, "experiments/detail.html", _detail_context(experiment, request))


@require_safe
def experiment_live(request, pk: int):
    """The part of the page htmx refreshes every 2 s while runs are going."""
    experiment = teams.visible_get(Experiment.objects.select_related("trace"), request.user, pk=pk)
    return render(request, "experiments/_live.html", _detail_context(experiment, request))


RUN_SORTS: dict[str, str | tuple[str, ...]] = {
    "order": "order",
    "arm": ("arm__position", "order"),
    "load": ("load_label", "order"),
    "repeat": ("repeat", "order"),
    "status": ("status", "order"),
    "started": "started_at",
}


def _detail_context(experiment: Experiment, request) -> dict:
    # Reads only: runs whose worker died are ended by the periodic reaper (runs.runs_reap).
    runs = list(experiment.runs.select_related("arm").order_by("order"))
    run_list = listing(
        request,
        experiment.runs.select_related("arm"),
        sorts=RUN_SORTS,
        default="order",
        per_page=50,
        prefix="runs_",
    )
    page_runs = list(run_list.page.object_list)
    for run in page_runs:
        ended = run.started_at and run.finished_at
        run.duration_s = (run.finished_at - run.started_at).total_seconds() if ended else None  # seconds
    run_list.page.object_list = page_runs
    return {
        "run_list": run_list,
        "experiment": experiment,
        "grid": experiment_grid(experiment=experiment, runs=runs),
        "progress": experiment_progress(experiment=experiment, runs=runs),
        "runs": runs,
        "live": experiment.status in ("running",),
        "failed_runs": [r for r in runs if r.status == Run.Status.FAILED],
        "until": experiment_until_decided(experiment=experiment),
        **teams.capabilities_in(request.user, experiment.trace.team_id),
    }


def _experiment_acted_on(request, pk: int, *, verb: str) -> Experiment:
    """The experiment ``pk`` of the user's teams (404 otherwise), once the user may ``verb`` it: its
    creator or an approver of its team, with the run-experiment permission there (403 otherwise)."""
    experiment = teams.visible_get(Experiment.objects.select_related("trace"), request.user, pk=pk)
    act_required(
        user=request.user,
        capability=RUN_EXPERIMENT,
        team_id=experiment.trace.team_id,
        owner_id=experiment.created_by_id,
        what=f"{verb} experiment #{pk}",
    )
    return experiment


@capability_required(RUN_EXPERIMENT)
@require_POST
def experiment_start_view(request, pk: int):
    experiment = _experiment_acted_on(request, pk, verb="start")
    n = experiment_start(experiment=experiment)
    messages.info(request, f"Queued {n} runs." if n else "This experiment has already started.")
    return redirect("experiments:detail", pk=pk)


@capability_required(RUN_EXPERIMENT)
@require_POST
def experiment_cancel_view(request, pk: int):
    experiment = _experiment_acted_on(request, pk, verb="cancel")
    result = experiment_cancel(experiment=experiment)
    messages.info(
        request,
        f"Cancelled {result['queued_cancelled']} queued runs; {result['running_stopping']} running run(s) stopping.",
    )
    return redirect("experiments:detail", pk=pk)


@capability_required(RUN_EXPERIMENT)
@require_POST
def run_retry_view(request, pk: int, run_pk: int):
    run = teams.visible_get(
        Run.objects.select_related("experiment__trace"), request.user, pk=run_pk, experiment_id=pk
    )
    act_required(
        user=request.user,
        capability=RUN_EXPERIMENT,
        team_id=run.experiment.trace.team_id,
        owner_id=run.experiment.created_by_id,
        what=f"retry runs of experiment #{pk}",
    )
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
    experiment = teams.visible_get(Experiment.objects.select_related("trace"), request.user, pk=pk)
    act_required(
        user=request.user, capability=RUN_EXPERIMENT, team_id=experiment.trace.team_id, what="clone experiments"
    )
    try:
        clone = experiment_clone(experiment=experiment, created_by=request.user)
    except ExperimentInvalid as exc:
        messages.error(request, f"Cannot clone: {exc}")
        return redirect("experiments:detail", pk=pk)
    messages.success(request, "Cloned as a draft: adjust nothing, or start it as it is.")
    return redirect("experiments:detail", pk=clone.pk)
