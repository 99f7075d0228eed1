"""JSON API for comparisons, GET /api/experiments/{id}/comparison, and an experiment's status
with its fit assessment, GET /api/experiments/{id} (in the experiments group of the document; its
shape, ``ExperimentOut``, is the experiments API's)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Path, Router

from console.analysis.selectors import comparison_for_experiment, comparison_state, experiment_fit_assessment
from console.api import ApiError, Id, Open, errors, row_or_404
from console.experiments.api import ExperimentOut
from console.experiments.models import Experiment
from console.experiments.selectors import experiment_status_payload

router = Router(tags=["analysis"])


class CorrectnessRateOut(Open):
    """Graded correctness of one arm, load and task (``console.analysis.grading``)."""

    arm: str
    load: str
    task: str
    gradable: int = Field(description="graded rows: requests with a reference, each repeat counted")
    correct: int = Field(description="graded rows whose answer was right")
    rate: float = Field(description="correct / gradable, 0..1")
    interval: list[float | None] = Field(description="[lo, hi] of the rate, request-clustered (docs/statistics.md)")
    n_requests: int = Field(description="distinct gradable requests: the resampled unit")


class CorrectnessOut(Open):
    rates: list[CorrectnessRateOut] = Field(description="per arm x load x task; only groups with a reference")
    counts: list[dict[str, Any]] = Field(description="paired counts (check 'correct') read by gate criterion 3")
    regressions: list[dict[str, Any]] = Field(description="baseline right, candidate wrong (first rows)")
    n_regressions: int
    n_gradable: int
    n_not_gradable: int


class CapacityArmOut(Open):
    """One arm's capacity at the SLO (``console.analysis.comparison.capacity``, docs/capacity.md)."""

    arm: str
    rate_multiplier: float | None = Field(
        description="highest passing arrival-rate multiplier (geometric mean over repeats); null: none passed"
    )
    interval: list[float | None] = Field(
        description="[lo, hi]: envelope of the repeats' search brackets; null for an end a search left open"
    )
    slo: dict[str, Any] = Field(description="traffic_class and the bounds every step was judged on")
    steps: list[dict[str, Any]] = Field(
        description="the curve: per step rate_multiplier, offered_rps, attainment, p95_tpot_s, p95_e2e_s, passed"
    )
    ratio: float | None = Field(None, description="capacity / the baseline's; null for the baseline")
    ratio_interval: list[float | None] = Field(default_factory=lambda: list[float | None]([None, None]))
    cost_per_success_usd: float | None = Field(None, description="price per hour / successful tasks per hour at capacity")


class CapacityOut(Open):
    slo: dict[str, Any]
    search: dict[str, Any] = Field(description="lo, hi (rate multipliers) and steps (the budget per search)")
    interval_method: str
    arms: list[CapacityArmOut]


class ComparisonOut(Open):
    """The stored comparison (``console.analysis.comparison.schema``), plus its ``state``."""

    state: str = Field(description="ready (current) or stale (being recomputed)")
    cost_basis: str | None = Field(
        None, description="what accelerator-hours are priced on: capacity (a search ran) or busy_time"
    )
    capacity: CapacityOut | None = Field(None, description="capacity at the SLO; null when no search ran")
    correctness: CorrectnessOut | None = Field(
        None, description="graded correctness; null in a comparison stored before grading existed"
    )


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
    experiment = row_or_404(Experiment.objects, id, what="experiment")
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
    """409 until a baseline run has finished and the comparison task has stored its result;
    ``state`` says whether it is current (``ready``) or being recomputed (``stale``)."""
    experiment = row_or_404(Experiment.objects, id, what="experiment")
    state = comparison_state(experiment=experiment)
    if state == "no baseline":
        raise ApiError(409, "no finished baseline run yet: nothing to compare")
    summary = comparison_for_experiment(experiment=experiment)
    if summary is None:
        raise ApiError(409, "the comparison is being computed: try again shortly")
    return dict(summary, state=state)
