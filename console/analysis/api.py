"""JSON API for comparisons: GET /api/experiments/{id}/comparison."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Path, Router

from console.analysis.comparison.schema import ComparisonSchemaError, Summary
from console.analysis.selectors import comparison_state, comparison_summary_for_experiment
from console.apikit import ApiError, Id, errors, row_or_404
from console.experiments.models import Experiment

router = Router(tags=["analysis"])


class ComparisonOut(Summary):
    """The stored comparison (``console.analysis.comparison.schema.Summary``, every field
    declared there), plus its ``state``."""

    state: str = Field(description="ready (current) or stale (being recomputed)")


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
    experiment = row_or_404(Experiment.objects, id, what="experiment")
    state = comparison_state(experiment=experiment)
    if state == "no baseline":
        raise ApiError(409, "no finished baseline run yet: nothing to compare")
    try:
        summary = comparison_summary_for_experiment(experiment=experiment)
    except ComparisonSchemaError as exc:
        raise ApiError(409, str(exc)) from exc
    if summary is None:
        raise ApiError(409, "the comparison is being computed: try again shortly")
    # Already validated field for field: the response only adds its state.
    return ComparisonOut.model_construct(**dict(summary), state=state)
