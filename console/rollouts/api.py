"""The JSON API of guarded rollouts: start one for an approved decision, read it live, pause,
resume, stop or record its rollback; the decision's triggers as Argo Rollouts and Flagger
documents. Operating a rollout needs ``accounts.draft_decision`` in the decision's team."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from django.http import HttpRequest
from ninja import Path, Query, Router, Status
from pydantic import Field, StrictFloat, StrictInt

from console.accounts import roles
from console.apikit import ApiError, Id, Open, Strict, access, errors, row_or_404, text
from console.decisions.models import Decision
from console.rollouts import selectors, services
from console.rollouts.models import Rollout

router = Router(tags=["rollouts"])
Number = Annotated[StrictInt, Field(ge=-(2**53), le=2**53)] | StrictFloat  # an int beyond a float's overflows


class StageIn(Strict):
    share: Number = Field(description="percent of traffic on the candidate, above 0 and at most 100")
    minutes: Number = Field(description="how long the stage runs, above 0 and at most a week")


class RolloutStartIn(Strict):
    prometheus: text(64) = Field(description="a registered Prometheus (SPECREVIEW_PROMETHEUS)")  # type: ignore[valid-type]
    candidate_pool: text(500) = Field(description='label matchers of the candidate\'s pods: pool="spec"')  # type: ignore[valid-type]
    control_pool: text(500) = Field(description='label matchers of the control\'s pods: pool="baseline"')  # type: ignore[valid-type]
    stages: list[StageIn] = Field(min_length=1, max_length=services.MAX_STAGES)
    alpha: Annotated[Number, Field(ge=0.0001, le=0.2)] = 0.05  # the start form's bounds


class ReasonIn(Strict):
    reason: text(services.REASON_MAX_CHARS) = ""  # type: ignore[valid-type]


class RolloutOut(Open):
    id: int
    decision_id: int
    state: str
    stage: int
    stages: list[dict[str, Any]]
    url: str


class RolloutDetailOut(RolloutOut):
    triggers: list[dict[str, Any]]
    events: list[dict[str, Any]]


class RolloutListOut(Open):
    rollouts: list[RolloutOut]


class ExportOut(Open):
    tool: str
    yaml: str
    documents: list[dict[str, Any]]
    skipped: list[dict[str, Any]]


def _refused(exc: services.RolloutError) -> ApiError:
    if exc.field:
        return ApiError(400, "field errors", details={exc.field: [str(exc)]})
    return ApiError(409, str(exc))


def _rollout(request: HttpRequest, pk: int) -> Rollout:
    rows = Rollout.objects.select_related("decision__experiment__trace", "started_by")
    return row_or_404(rows, pk, what="rollout", user=request.user)


@router.post(
    "/decisions/{id}/rollouts",
    response={201: RolloutDetailOut, **errors(400, 404, 409)},
    url_name="api-decision-rollouts",
    summary="Start a guarded rollout of an approved decision",
    **access(capability=roles.DRAFT_DECISION, path_object=Decision),
)
def rollout_start_api(request: HttpRequest, id: Path[Id], payload: RolloutStartIn):  # type: ignore[valid-type]
    """Needs permission accounts.draft_decision in the decision's team. 400 names the field (an
    unregistered Prometheus, a pool selector that is not label matchers, stages); 409 when the
    decision is not approved, keeps speculation off, has no trigger with a query, or already has
    a rollout in progress."""
    decision = row_or_404(Decision.objects.select_related("experiment__trace"), id, what="decision", user=request.user)
    try:
        rollout = services.rollout_start(
            decision=decision, actor=request.user, **payload.model_dump(mode="json")
        )
    except services.RolloutError as exc:
        raise _refused(exc) from None
    return Status(201, selectors.rollout_payload(_rollout(request, rollout.pk)))


@router.get(
    "/decisions/{id}/rollouts",
    response={200: RolloutListOut, **errors(400, 404)},
    url_name="api-decision-rollouts",
    summary="A decision's rollouts, newest first",
)
def rollouts_of_decision(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    decision = row_or_404(Decision.objects, id, what="decision", user=request.user)
    return {"rollouts": [selectors.rollout_payload(r, full=False) for r in selectors.rollouts_of(decision=decision, user=request.user)]}


@router.get(
    "/rollouts/{id}",
    response={200: RolloutDetailOut, **errors(400, 404)},
    url_name="api-rollout",
    summary="A rollout live: each trigger's last look, production against the prediction, its events",
)
def rollout_item(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    return selectors.rollout_payload(_rollout(request, id))


def _act(request: HttpRequest, pk: int, act: Any, **kwargs: Any) -> dict[str, Any]:
    rollout = _rollout(request, pk)
    try:
        act(rollout=rollout, actor=request.user, **kwargs)
    except services.RolloutError as exc:
        raise _refused(exc) from None
    return selectors.rollout_payload(_rollout(request, pk))


@router.post(
    "/rollouts/{id}/pause",
    response={200: RolloutDetailOut, **errors(400, 404, 409)},
    url_name="api-rollout-pause",
    summary="Pause a running rollout (no looks are taken while paused)",
    **access(capability=roles.DRAFT_DECISION, path_object=Rollout),
)
def rollout_pause_api(request: HttpRequest, id: Path[Id], payload: ReasonIn):  # type: ignore[valid-type]
    """Needs permission accounts.draft_decision. 409 unless it is running."""
    return _act(request, id, services.rollout_pause, reason=payload.reason)


@router.post(
    "/rollouts/{id}/resume",
    response={200: RolloutDetailOut, **errors(400, 404, 409)},
    url_name="api-rollout-resume",
    summary="Resume a rollout an operator paused (a breached one is rolled back or stopped)",
    **access(capability=roles.DRAFT_DECISION, path_object=Rollout),
)
def rollout_resume_api(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    """Needs permission accounts.draft_decision. 409 unless an operator paused it."""
    return _act(request, id, services.rollout_resume)


@router.post(
    "/rollouts/{id}/stop",
    response={200: RolloutDetailOut, **errors(400, 404, 409)},
    url_name="api-rollout-stop",
    summary="Stop a rollout early (archived with the reason)",
    **access(capability=roles.DRAFT_DECISION, path_object=Rollout),
)
def rollout_stop_api(request: HttpRequest, id: Path[Id], payload: ReasonIn):  # type: ignore[valid-type]
    """Needs permission accounts.draft_decision. 400 without a reason; 409 once it ended."""
    return _act(request, id, services.rollout_stop, reason=payload.reason)


@router.post(
    "/rollouts/{id}/rolled-back",
    response={200: RolloutDetailOut, **errors(400, 404, 409)},
    url_name="api-rollout-rolled-back",
    summary="Record that the fleet was reverted to the decision's revert config (archived)",
    **access(capability=roles.DRAFT_DECISION, path_object=Rollout),
)
def rollout_rolled_back_api(request: HttpRequest, id: Path[Id], payload: ReasonIn):  # type: ignore[valid-type]
    """Needs permission accounts.draft_decision. 400 without a reason; 409 once it ended."""
    return _act(request, id, services.rollout_rolled_back, reason=payload.reason)


@router.get(
    "/decisions/{id}/rollout-export",
    response={200: ExportOut, **errors(400, 404)},
    url_name="api-decision-rollout-export",
    summary="The decision's triggers as an Argo Rollouts AnalysisTemplate or Flagger MetricTemplates and Canary analysis",
)
def rollout_export_api(
    request: HttpRequest,
    id: Path[Id],  # type: ignore[valid-type]
    tool: Literal["argo", "flagger"] = Query(...),
    prometheus_address: text(500) = Query("http://prometheus.monitoring:9090"),  # type: ignore[valid-type]
    namespace: text(63) = Query("default", description="Flagger's namespace"),  # type: ignore[valid-type]
    stages: text(400) = Query(selectors.EXPORT_STAGES, description="Flagger's steps: share:minutes,..."),  # type: ignore[valid-type]
):
    """400 names what Kubernetes or the tool would refuse (a namespace, an address, the stages)."""
    decision = row_or_404(Decision.objects, id, what="decision", user=request.user)
    try:
        return selectors.export_documents(
            decision=decision, tool=tool, prometheus_address=prometheus_address, namespace=namespace,
            stages=selectors.stages_parse(stages),
        )
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
