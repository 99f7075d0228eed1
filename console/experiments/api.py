"""JSON API for experiments: define (and start), list, cancel.

GET /api/experiments/{id} (status with the fit assessment) is served by ``console.analysis.api``:
the assessment is the analysis app's, and experiments sits below it. Its response shape,
``ExperimentOut`` with ``FitAssessmentOut``, stays here: every experiment response carries the
field (null outside that GET)."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Path, Router, Status
from pydantic import Field

from console.accounts import teams
from console.accounts.access import act_required
from console.accounts.roles import RUN_EXPERIMENT
from console.apikit import LONG_TEXT, ApiError, Id, Open, Strict, access, errors, row_or_404, text
from console.experiments.models import Experiment
from console.experiments.selectors import experiment_status_payload
from console.experiments.services import (
    SAMPLING,
    SPLITS,
    ExperimentInvalid,
    experiment_cancel,
    experiment_create,
    experiment_start,
)
from console.traces.models import Trace
from workers.engines import ENGINE_KINDS

router = Router(tags=["experiments"])

EngineKind = Enum("EngineKind", {k: k for k in ENGINE_KINDS}, type=str)  # type: ignore[misc]
# Bounds that keep one request from expanding into an unbounded run matrix.
MAX_ARMS, MAX_LOADS, MAX_REPEATS = 32, 32, 100
PG_INT_MAX = 2**31 - 1


class LoadLevelIn(Strict):
    rate_multiplier: float = Field(1.0, gt=0, le=1000, description="times the trace's own arrival rate")
    concurrency: int | None = Field(
        None, ge=1, le=100_000, description="client-side cap on in-flight requests"
    )
    label: text(40) | None = None  # type: ignore[valid-type]
    weight: float | None = Field(
        None, ge=0, le=1e6, description="share of the declared workload mix (gate criterion 1); on every level or none"
    )


class OutputBucketIn(Strict):
    lo: int = Field(ge=0, le=PG_INT_MAX, description="lower edge (tokens) of the recorded output length")
    output_limit: int = Field(ge=1, le=PG_INT_MAX, description="cap on max_tokens for this bucket's requests")
    label: text(40) | None = Field(None, description="ignored: derived from the edges")  # type: ignore[valid-type]
    hi: int | None = Field(None, description="ignored: the next bucket's edge")


class CandidateIn(Strict):
    speculative_config: dict[str, Any] = Field(
        description="vLLM's speculative_config keys; num_speculative_tokens may be a list (a sweep)"
    )
    engine_args: dict[str, Any] = Field(default_factory=dict, description="merged over the baseline's")
    label: text(200) | None = None  # type: ignore[valid-type]
    engine: EngineKind | None = Field(None, description="must equal the experiment's engine")


class UntilDecidedIn(Strict):
    """Run until decided (docs/statistics.md): ``repeats`` is then the first batch."""

    max_repeats: int = Field(ge=1, le=50, description="the most repeats, the first batch included")
    margin_s: float | None = Field(
        None,
        ge=0,
        le=86_400,
        allow_inf_nan=False,
        description="equivalence margin in the primary endpoint's unit (seconds); null or 0: no equivalence decision",
    )
    max_runs: int | None = Field(None, ge=1, le=1_000_000, description="run budget")
    max_accelerator_hours: float | None = Field(
        None, gt=0, le=1e6, allow_inf_nan=False, description="budget of busy accelerator-hours"
    )


class ExperimentIn(Strict):
    trace: Id = Field(description="id of a stored trace")
    start: bool = Field(True, description="queue the runs now; false leaves a draft")
    name: text(200) | None = None  # type: ignore[valid-type]
    target_model: text(500, min_length=1)  # type: ignore[valid-type]
    engine: EngineKind = EngineKind("hf")  # type: ignore[valid-type]
    baseline_engine_args: dict[str, Any] = Field(default_factory=dict)
    candidates: list[CandidateIn] = Field(min_length=1, max_length=MAX_ARMS)
    load_levels: text(500) | list[text(40) | LoadLevelIn] = Field(  # type: ignore[valid-type]
        "1x", description='"0.5x,1x,2x/c4,c8", or a list of such labels or objects', max_length=500
    )
    split: Literal[SPLITS] = "all"  # type: ignore[valid-type]
    hardware_label: text(200) = ""  # type: ignore[valid-type]
    output_limit: int | None = Field(None, ge=1, le=PG_INT_MAX, description="cap on max_tokens (tokens)")
    output_buckets: text(500) | list[OutputBucketIn] | None = Field(  # type: ignore[valid-type]
        None,
        max_length=64,
        description='buckets of recorded output length, a matrix axis: "0:64,64:256,256:1024" (edge:limit) '
        'or [{"lo": 0, "output_limit": 64}, ...]; edges increase, the last bucket has no upper edge',
    )
    deadlines: dict[str, dict[str, float]] | None = Field(
        None, description='seconds per class: {"interactive": {"e2e_s": 10, "ttft_s": 1}}'
    )
    sampling: Literal[SAMPLING] = "trace"  # type: ignore[valid-type]
    repeats: int = Field(3, ge=1, le=MAX_REPEATS)
    warmup: int = Field(1, ge=0, le=MAX_REPEATS)
    cost_per_hour_usd: float = Field(0.0, ge=0, le=1e9, description="USD per accelerator-hour")
    power_price_usd_per_kwh: float | None = Field(None, ge=0, le=1e6)
    endpoints: dict[str, Any] | None = Field(
        None, description="declared endpoints of the comparison (docs/decisions.md); defaults otherwise"
    )
    capacity_search: dict[str, Any] | None = Field(
        None,
        description='capacity search per arm and repeat (docs/capacity.md): {"slo": {"traffic_class": '
        '"interactive", "attainment": 0.99, "p95_tpot_s": 0.2, "p95_e2e_s": 10}, "lo": 0.25, "hi": 16, '
        '"steps": 5}; null = off',
    )
    scheduling: Literal["parallel", "lockstep"] = Field(
        "parallel",
        description="parallel: every run released at once; lockstep: one run at a time in matrix order, "
        "so the interleaving holds with many workers (docs/gpu-workers.md)",
    )
    until_decided: UntilDecidedIn | None = Field(
        None,
        description="add repeats one at a time until the declared primary endpoint is decided or the budget is "
        "spent (needs endpoints.primary_metric); null = off",
    )
    notes: text(LONG_TEXT) = ""  # type: ignore[valid-type]


class ExperimentRowOut(Open):
    id: int
    name: str
    status: str
    trace: int
    created_at: str


class ArmOut(Open):
    label: str
    baseline: bool
    config_hash: str
    speculative_config: dict[str, Any] | None


class RunOut(Open):
    id: int
    order: int
    arm: str
    load: str
    output_bucket: str
    repeat: int
    status: str


class FitConditionOut(Open):
    name: str = Field(description="quality_bar, output_length, serving_headroom, interactive_traffic, proposer")
    title: str
    verdict: Literal["likely", "unlikely", "unknown"]
    numbers: dict[str, Any] = Field(description="the figures behind the verdict (units in docs/fit.md)")
    reason: str = Field(description="why this verdict; for unknown, what is missing")


class GenerationShareOut(Open):
    traffic_class: str
    n: int = Field(description="completed baseline requests pooled")
    median: float | None = Field(description="(e2e - TTFT) / e2e, fraction; e2e includes metadata external time")
    p95: float | None
    includes_external_time: bool
    by_load: list[dict[str, Any]]
    warning: str | None = Field(description="set when the median is under one half")


class FitAssessmentOut(Open):
    stage: str = Field(description='"before any run" or "after N baseline run(s)"')
    conditions: list[FitConditionOut]
    generation_share: list[GenerationShareOut]
    pending_runs: int = Field(description="finished baseline runs whose fit facts are not cached yet")


class ExperimentOut(Open):
    id: int
    name: str
    status: str
    trace: int
    split: str
    engine: str
    target_model: str
    arms: list[ArmOut]
    load_levels: list[Any]
    output_buckets: list[Any]
    repeats: int
    until_decided: dict[str, Any] | None = Field(
        None, description="run until decided: the plan, each look and the stop (docs/statistics.md); null = off"
    )
    progress: dict[str, Any]
    runs: list[RunOut]
    fit_assessment: FitAssessmentOut | None = Field(
        None, description="when speculation is likely to fit (docs/fit.md); on GET /experiments/{id} only"
    )


class ExperimentCancelOut(ExperimentOut):
    cancelled: dict[str, int]


@router.get(
    "/experiments",
    response={200: list[ExperimentRowOut], **errors()},
    url_name="api-experiments",
    summary="List experiments",
)
def experiments_list(request: HttpRequest):
    return [
        {
            "id": e.pk,
            "name": e.name,
            "status": e.status,
            "trace": e.trace_id,
            "created_at": e.created_at.isoformat(),
        }
        for e in teams.visible(Experiment.objects.order_by("-created_at"), request.user)[:500]
    ]


@router.post(
    "/experiments",
    response={201: ExperimentOut, **errors(400)},
    url_name="api-experiments",
    summary="Define an experiment (and start it unless start=false)",
    **access(capability=RUN_EXPERIMENT),
)
def experiments_create(request: HttpRequest, payload: ExperimentIn):
    """Needs permission accounts.run_experiment. The schema checks shapes and bounds; the service
    checks the rest (engine arguments, speculative configs, load levels) and names the field."""
    trace = teams.visible(Trace.objects.all(), request.user).filter(pk=payload.trace).first()
    if trace is None:  # another team's trace included: its existence is not told
        raise ApiError(400, "field errors", details={"trace": [f"no trace with id {payload.trace}"]})
    teams.require(request.user, RUN_EXPERIMENT, team_id=trace.team_id, what="run experiments on this trace")
    fields = payload.model_dump(exclude={"trace", "start"}, exclude_unset=True, mode="json")
    fields["candidates"] = [
        {k: v for k, v in c.model_dump(mode="json", exclude_none=True).items()} for c in payload.candidates
    ]
    if isinstance(payload.output_buckets, list):
        fields["output_buckets"] = [
            b.model_dump(include={"lo", "output_limit"}) for b in payload.output_buckets
        ]
    if isinstance(payload.load_levels, list):
        fields["load_levels"] = [
            lv.model_dump(exclude_none=True) if isinstance(lv, LoadLevelIn) else lv
            for lv in payload.load_levels
        ]
    if not fields.get("name"):
        fields["name"] = f"experiment on {trace.name}"[:200]
    try:
        experiment = experiment_create(trace=trace, created_by=request.user, **fields)
    except ExperimentInvalid as exc:
        raise ApiError(400, "field errors", details=exc.errors) from None
    if payload.start:
        experiment_start(experiment=experiment)
        experiment.refresh_from_db()  # the answer says what the start made of it (running), not "draft"
    return Status(201, experiment_status_payload(experiment=experiment))


@router.post(
    "/experiments/{id}/cancel",
    response={200: ExperimentCancelOut, **errors(400, 404)},
    url_name="api-experiment-cancel",
    summary="Cancel: revoke queued runs and stop the running one",
    **access(capability=RUN_EXPERIMENT, path_object=Experiment),
)
def experiment_cancel_api(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    """Needs permission accounts.run_experiment, and to be the experiment's creator or an approver."""
    experiment = row_or_404(Experiment.objects.select_related("trace"), id, what="experiment", user=request.user)
    act_required(
        user=request.user,
        capability=RUN_EXPERIMENT,
        team_id=experiment.trace.team_id,
        owner_id=experiment.created_by_id,
        what=f"cancel experiment #{id}",
    )
    return {
        "cancelled": experiment_cancel(experiment=experiment),
        **experiment_status_payload(experiment=experiment),
    }
