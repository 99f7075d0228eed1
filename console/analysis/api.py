"""JSON API for comparisons, GET /api/experiments/{id}/comparison, and an experiment's status
with its fit assessment, GET /api/experiments/{id} (in the experiments group of the document; its
shape, ``ExperimentOut``, is the experiments API's)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Path, Router

from console.accounts.access import raw_text_allowed
from console.accounts.services import raw_text_access_record
from console.analysis.comparison.schema import ComparisonSchemaError, Summary
from console.analysis.raw_text import summary_shown
from console.analysis.selectors import (
    comparison_state,
    comparison_summary_for_experiment,
    experiment_fit_assessment,
)
from console.apikit import ApiError, Id, errors, row_or_404
from console.experiments.api import ExperimentOut
from console.experiments.models import Experiment
from console.experiments.selectors import experiment_status_payload

router = Router(tags=["analysis"])


class ComparisonOut(Summary):
    """The stored comparison (``console.analysis.comparison.schema.Summary``, every field
    declared there), plus its ``state``."""

    state: str = Field(description="ready (current) or stale (being recomputed)")


@router.get(
    "/experiments/{id}",
    response={200: ExperimentOut, **errors(400, 404)},
    url_name="api-experiment",
    summary="Status and progress of an experiment",
    tags=["experiments"],
    # The id it had in the experiments API: clients generated from the document name the call by it.
    operation_id="console_experiments_api_experiment_detail",
)
def experiment_detail(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    """Status and progress, and the fit assessment (read from stored data, never computed here)."""
    experiment = row_or_404(Experiment.objects, id, what="experiment", user=request.user)
    return {
        **experiment_status_payload(experiment=experiment),
        "fit_assessment": experiment_fit_assessment(experiment=experiment),
    }


@router.get(
    "/experiments/{id}/comparison",
    response={200: ComparisonOut, **errors(400, 404, 409)},
    url_name="api-comparison",
    summary="The comparison summary of an experiment",
)
def comparison(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    """409 until a baseline run has finished and the comparison task has stored its result, and
    for a comparison stored in another schema version or shape (the message says so);
    ``state`` says whether it is current (``ready``) or being recomputed (``stale``)."""
    experiment = row_or_404(Experiment.objects.select_related("trace"), id, what="experiment", user=request.user)
    if comparison_state(experiment=experiment) == "no baseline":
        raise ApiError(409, "no finished baseline run yet: nothing to compare")
    try:
        summary = comparison_summary_for_experiment(experiment=experiment)
    except ComparisonSchemaError as exc:
        raise ApiError(409, str(exc)) from exc
    if summary is None:
        raise ApiError(409, "the comparison is being computed: try again shortly")
    # Read after the summary: a comparison stored between the two reads is then "ready" (or
    # "stale"), never "missing" beside the summary it answers (tests/test_ci_flow.py saw that race).
    state = comparison_state(experiment=experiment)
    raw_text = raw_text_allowed(user=request.user, team_id=experiment.trace.team_id)
    if raw_text and summary.quality.first_divergences:
        raw_text_access_record(user=request.user, view="comparison API", object_ref=f"experiment {id}")
    # Already validated field for field: the response only adds its state.
    return ComparisonOut.model_construct(**dict(summary_shown(summary, raw_text=raw_text)), state=state)
