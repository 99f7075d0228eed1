from __future__ import annotations

from django.http import JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import path

from console.accounts.roles import RUN_EXPERIMENT
from console.api import ApiError, api_endpoint, json_body
from console.experiments.models import Experiment
from console.experiments.selectors import experiment_status_payload
from console.experiments.services import (
    ExperimentInvalid,
    experiment_cancel,
    experiment_create,
    experiment_start,
)
from console.traces.models import Trace

CREATE_FIELDS = {
    "name",
    "target_model",
    "engine",
    "baseline_engine_args",
    "candidates",
    "load_levels",
    "split",
    "hardware_label",
    "output_limit",
    "deadlines",
    "sampling",
    "repeats",
    "warmup",
    "cost_per_hour_usd",
    "power_price_usd_per_kwh",
    "notes",
}


@api_endpoint(
    path="/api/experiments",
    methods={"GET": "List experiments", "POST": "Define an experiment (and start it unless start=false)"},
    capability={"POST": RUN_EXPERIMENT},
)
def experiments(request):
    if request.method == "GET":
        return [
            {
                "id": e.pk,
                "name": e.name,
                "status": e.status,
                "trace": e.trace_id,
                "created_at": e.created_at.isoformat(),
            }
            for e in Experiment.objects.all()[:500]
        ]
    body = json_body(request)
    if not isinstance(body, dict):
        raise ApiError(400, "body must be a JSON object")
    unknown = set(body) - CREATE_FIELDS - {"trace", "start"}
    if unknown:
        raise ApiError(400, f"unknown fields: {', '.join(sorted(unknown))}")
    trace_id = body.get("trace")
    trace = Trace.objects.filter(pk=trace_id).first() if isinstance(trace_id, int) else None
    if trace is None:
        raise ApiError(400, "field errors", details={"trace": [f"no trace with id {trace_id!r}"]})
    kwargs = {k: v for k, v in body.items() if k in CREATE_FIELDS}
    kwargs.setdefault("name", f"experiment on {trace.name}")
    try:
        experiment = experiment_create(trace=trace, created_by=request.user, **kwargs)
    except ExperimentInvalid as exc:
        raise ApiError(400, "field errors", details=exc.errors) from None
    except TypeError as exc:
        raise ApiError(400, f"bad field type: {exc}") from None
    if body.get("start", True):
        experiment_start(experiment=experiment)
    return JsonResponse(experiment_status_payload(experiment=experiment), status=201)


@api_endpoint(path="/api/experiments/{id}", methods={"GET": "Status and progress of an experiment"})
def experiment_detail(request, pk: int):
    return experiment_status_payload(experiment=get_object_or_404(Experiment, pk=pk))


@api_endpoint(
    path="/api/experiments/{id}/cancel",
    methods={"POST": "Cancel: revoke queued runs and stop the running one"},
    capability={"POST": RUN_EXPERIMENT},
)
def experiment_cancel_api(request, pk: int):
    experiment = get_object_or_404(Experiment, pk=pk)
    return {
        "cancelled": experiment_cancel(experiment=experiment),
        **experiment_status_payload(experiment=experiment),
    }


urlpatterns = [
    path("experiments", experiments, name="api-experiments"),
    path("experiments/<int:pk>", experiment_detail, name="api-experiment"),
    path("experiments/<int:pk>/cancel", experiment_cancel_api, name="api-experiment-cancel"),
]
