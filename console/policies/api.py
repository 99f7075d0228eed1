"""JSON API for slice policies: GET /api/policies[?experiment=ID], POST /api/policies (fit one),
GET /api/policies/{id} (with its holdout warning), POST /api/policies/{id}/adopt (store the simpler
rule the holdout preferred), GET /api/policies/{id}/deployment (vllm serve lines and the LiteLLM
router config)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Path, Query, Router, Status
from pydantic import Field

from console.accounts.roles import RUN_EXPERIMENT
from console.apikit import MAX_ID, ApiError, Id, Open, Strict, access, errors, row_or_404, text
from console.experiments.models import Experiment
from console.policies import deploy, schedule_page
from console.policies.fit_request import PolicyFitRefused, policy_fit_checked
from console.policies.models import SlicePolicy
from console.policies.selectors import (
    PolicyInputError,
    policy_deployment,
    policy_export,
    policy_holdout_warning,
    policy_list,
)
from console.policies.services import policy_adopt

router = Router(tags=["policies"])


class PolicyOut(Open):
    id: int
    url: str
    experiment_id: int
    rules_sha256: str
    train: dict[str, Any]
    holdout: dict[str, Any]


class PolicyDetailOut(PolicyOut):
    rules: list[Any]
    train_scores: Any
    holdout_scores: Any
    downloads: dict[str, str]
    holdout_warning: dict[str, Any] | None = Field(
        description="a simpler rule (speculation everywhere with an arm, or nowhere) that beats this policy on "
        "its holdout with an interval excluding zero (delta_s = alternative - policy, seconds saved per "
        "request), and the offer that stores it; null when none does"
    )


class PolicyAdoptIn(Strict):
    """``alternative``: ``all_off`` or ``all_on:<arm>``, as the holdout warning names it."""

    alternative: text(200, min_length=1)  # type: ignore[valid-type]


class PolicyDeploymentOut(Open):
    router: str
    model: str
    rules_sha256: str
    tag_prefix: str
    other: str
    features: dict[str, list[Any]]
    pools: list[dict[str, Any]]
    table: list[dict[str, Any]]
    router_config: dict[str, Any]


class PolicyFitIn(Strict):
    """What ``policy_fit`` takes; omitted fields take the fit form's defaults (every candidate, the
    first load level, TPOT, the default features, 10 train requests per slice, a 0.95 interval)."""

    experiment: Id  # type: ignore[valid-type]
    arms: list[text(200)] | None = Field(None, max_length=64)  # type: ignore[valid-type]
    load: text(100) | None = Field(None, description='a load level label, or "all" to pool every level')  # type: ignore[valid-type]
    metric: text(50) | None = None  # type: ignore[valid-type]
    features: list[text(50)] | None = Field(None, max_length=32)  # type: ignore[valid-type]
    min_support: int | None = Field(None, ge=2, le=1_000_000)
    ci: float | None = Field(None, ge=0.5, le=0.999)


def _downloads(pk: int) -> dict[str, str]:
    return {
        "rules_json": f"/policies/{pk}/rules.json",
        "vllm_serve": f"/policies/{pk}/vllm-serve.sh",
        "litellm_config": f"/policies/{pk}/litellm.yaml",
        "deployment": f"/api/policies/{pk}/deployment",
    }


@router.get(
    "/policies/{id}/deployment",
    response={200: PolicyDeploymentOut, **errors(400, 404, 409)},
    url_name="api-policy-deployment",
    summary="What to deploy for a slice policy: vllm serve lines per pool and the LiteLLM router config",
)
def policy_deployment_api(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    """409 when the policy cannot be deployed (an arm it routes to is gone, a stored value cannot
    be put on a vLLM command line); the error says which."""
    item = row_or_404(SlicePolicy.objects.select_related("experiment"), id, what="policy", user=request.user)
    try:
        return deploy.deployment_document(policy_deployment(policy=item))
    except deploy.DeployError as exc:
        raise ApiError(409, f"policy {item.pk} cannot be deployed: {exc}") from exc


class ScheduleOut(Open):
    experiment_id: int
    speculative_config: dict[str, Any] | None
    reason: str | None


@router.get(
    "/experiments/{id}/schedule",
    response={200: ScheduleOut, **errors(400, 404)},
    url_name="api-experiment-schedule",
    summary="Draft length by batch size: vLLM's num_speculative_tokens_per_batch_size from the load axis, with its evidence",
)
def experiment_schedule_api(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    """``speculative_config`` is null when nothing should be enabled or nothing can be derived
    (``reason`` says which: no comparison yet, no load better than the baseline beyond the noise
    floor, batch size not measured). ``bands`` and ``loads`` carry the evidence."""
    experiment = row_or_404(Experiment.objects, id, what="experiment", user=request.user)
    return schedule_page.schedule_document(schedule_page.experiment_schedule(experiment=experiment))


@router.get(
    "/policies/{id}",
    response={200: PolicyDetailOut, **errors(400, 404)},
    url_name="api-policy",
    summary="A slice policy: its rules, train and holdout scores",
)
def policy(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    item = row_or_404(SlicePolicy.objects.select_related("created_by"), id, what="policy", user=request.user)
    return _detail(item)


def _detail(item: SlicePolicy) -> dict[str, Any]:
    return policy_export(policy=item) | {
        "rules": (item.rules or {}).get("rules", []),
        "train_scores": item.train_scores,
        "holdout_scores": item.holdout_scores,
        "downloads": _downloads(item.pk),
        "holdout_warning": policy_holdout_warning(policy=item),
    }


@router.post(
    "/policies/{id}/adopt",
    response={201: PolicyDetailOut, **errors(400, 404)},
    url_name="api-policy-adopt",
    summary="Store the simpler rule a policy's holdout preferred as a new policy",
    **access(capability=RUN_EXPERIMENT, path_object=SlicePolicy),
)
def policy_adopt_api(request: HttpRequest, id: Path[Id], payload: PolicyAdoptIn):  # type: ignore[valid-type]
    """Needs permission accounts.run_experiment. ``alternative``: one the policy scored on its
    holdout (its ``holdout_warning.alternative``, or any key of ``holdout_scores.alternatives``);
    a 400 names the field otherwise. The new policy was chosen by looking at this holdout: its
    holdout score is no independent check (``fit_details.adopted`` says where it came from)."""
    item = row_or_404(SlicePolicy.objects.select_related("experiment"), id, what="policy", user=request.user)
    try:
        adopted = policy_adopt(policy=item, alternative=payload.alternative, created_by=request.user)
    except PolicyInputError as exc:
        raise ApiError(400, str(exc), details={"alternative": [str(exc)]}) from None
    return Status(201, _detail(adopted))


@router.post(
    "/policies",
    response={201: PolicyDetailOut, **errors(400)},
    url_name="api-policies-fit",
    summary="Fit a slice policy on an experiment's train split and score it on its holdout",
    **access(capability=RUN_EXPERIMENT),
)
def policy_fit_api(request: HttpRequest, payload: PolicyFitIn):
    """Needs permission accounts.run_experiment. The same checks as the fit form: a 400 names the
    field (an arm the experiment does not have, a load level it did not run, a feature that is
    not known before execution) or says why the experiment cannot be fitted yet."""
    try:
        policy = policy_fit_checked(fields=payload.model_dump(exclude_none=True), created_by=request.user)
    except PolicyFitRefused as exc:
        raise ApiError(400, exc.message, details=exc.details) from None
    return Status(201, _detail(policy))


@router.get(
    "/policies",
    response={200: list[PolicyOut], **errors(400, 404)},
    url_name="api-policies",
    summary="Slice policies, optionally of one experiment",
)
def policies(request: HttpRequest, experiment: int | None = Query(None, ge=1, le=MAX_ID)):
    """404 when ``experiment`` names no experiment."""
    chosen = None if experiment is None else row_or_404(Experiment.objects, experiment, what="experiment", user=request.user)
    return [policy_export(policy=p) for p in policy_list(user=request.user, experiment=chosen)[:500]]
