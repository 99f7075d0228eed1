"""JSON API: list and read decisions, draft one from an experiment (and a slice policy), edit and
submit a draft, sign off (approver token only): the whole flow a CI pipeline drives (docs/ci.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from ninja import Path, Query, Router, Status
from pydantic import Field, StrictFloat, StrictInt

from console.accounts import roles, teams
from console.analysis.comparison.schema import ComparisonSchemaError
from console.apikit import MAX_ID, ApiError, Id, Open, Strict, access, errors, row_or_404, text
from console.decisions import selectors, services, signing, triggers
from console.decisions.limits import APPROVALS_MAX, APPROVALS_MIN, FIELD_MAX_CHARS, NOTE_MAX_CHARS
from console.decisions.models import Decision
from console.decisions.payload import decision_payload
from console.experiments.models import Experiment
from console.policies.models import SlicePolicy
from console.policies.selectors import policy_export
from console.traces.models import TRAFFIC_CLASSES

router = Router(tags=["decisions"])

# Non-blank and NUL-free: what the services mean by "give a comment" / "name the metric".
NON_BLANK = r"^[^\x00]*[^\s\x00][^\x00]*$"
Number = StrictInt | StrictFloat
Positive = Annotated[StrictInt, Field(gt=0)] | Annotated[StrictFloat, Field(gt=0)]


class RollbackTriggerIn(Open):
    """One rollback trigger (docs/rollouts.md): breach when the value, looked at every
    ``window_min`` minutes, is beyond ``threshold`` by the sequential test after ``min_samples``
    looks. ``query``: PromQL with ``$pool`` (the pool's label matchers) and ``$window``;
    ``compare``: ``control`` (candidate minus control, needs the query) or ``absolute``."""

    metric: Annotated[str, Field(pattern=NON_BLANK, max_length=triggers.METRIC_MAX_CHARS)]
    op: Literal[triggers.OPS]  # type: ignore[valid-type]
    threshold: Number
    window_min: Positive = Field(description="minutes")
    unit: text(triggers.UNIT_MAX_CHARS) = ""  # type: ignore[valid-type]
    compare: Literal[triggers.COMPARES] = "absolute"  # type: ignore[valid-type]
    query: Annotated[str, Field(max_length=triggers.QUERY_MAX_CHARS, pattern=r"^[^\r\n]*$")] = ""
    min_samples: Annotated[StrictInt, Field(ge=1, le=triggers.MIN_SAMPLES_MAX)] = 3
    action: Literal[triggers.ACTIONS] = "pause"  # type: ignore[valid-type]


class ChecklistAnswerIn(Open):
    answer: Literal["", "yes", "no"] | None = None  # checklist.YES, checklist.NO
    note: text(NOTE_MAX_CHARS) = ""  # type: ignore[valid-type]


Approvals = Annotated[StrictInt, Field(ge=APPROVALS_MIN, le=APPROVALS_MAX)]
APPROVALS_HELP = (
    "distinct approvers it needs (none of them its drafter, editors or submitter); "
    "null: the deployment's SPECREVIEW_APPROVALS_REQUIRED; fixed at submission"
)

# Lengths are the service's (console.decisions.limits), so the API, the forms and the service agree.
MAX = FIELD_MAX_CHARS
CLEARS = "null clears it"


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)  # the document says "optional", not "null by default"


# Omitted: unchanged. Null: only where the service has a "nothing" for it (services.CLEARED_BY_NULL);
# a title, a proposal and a traffic class always have a value, so null is refused there.
def _absent() -> Any:
    """Optional, and never null: omitted means unchanged."""
    return Field(None, json_schema_extra=_no_default)


class DecisionCreateIn(Strict):
    """What the draft form asks; the gate, the checklist and the rollback plan are drafted from the
    experiment's comparison, as on the page."""

    experiment: Id
    proposal: Literal[tuple(Decision.Proposal.values)]  # type: ignore[valid-type]
    traffic_class: Literal[TRAFFIC_CLASSES]  # type: ignore[valid-type]
    candidate_arm: text(200) | None = Field(None, description="the candidate arm's label (not with keep_off)")  # type: ignore[valid-type]
    title: text(MAX["title"]) = ""  # type: ignore[valid-type]
    rationale: text(MAX["rationale"]) = ""  # type: ignore[valid-type]
    slice_policy: Id | None = Field(
        None, description="a policy fitted on this experiment: frozen into the evidence"
    )
    supersedes: Id | None = Field(
        None, description="a signed decision of the same team that this one replaces"
    )
    approvals_required: Approvals | None = Field(None, description=APPROVALS_HELP)


class DecisionPatchIn(Strict):
    """The fields of a draft that may change (omitted: unchanged; null, where allowed: cleared); a
    signed decision answers 409."""

    title: Annotated[str, Field(pattern=NON_BLANK, max_length=MAX["title"])] = _absent()
    proposal: Literal[tuple(Decision.Proposal.values)] = _absent()  # type: ignore[valid-type]
    traffic_class: Literal[TRAFFIC_CLASSES] = _absent()  # type: ignore[valid-type]
    rationale: text(MAX["rationale"]) | None = Field(None, description=CLEARS)  # type: ignore[valid-type]
    policy: dict[str, Any] | None = Field(None, description=CLEARS)
    policy_ref: text(MAX["policy_ref"]) | None = Field(None, description=CLEARS)  # type: ignore[valid-type]
    gate_settings: dict[str, Any] | None = Field(None, description=f"{CLEARS} (the defaults)")
    checklist_answers: dict[str, ChecklistAnswerIn] | None = Field(None, description=CLEARS)
    rollback_triggers: list[RollbackTriggerIn] | None = Field(None, max_length=100, description=CLEARS)
    rollback_revert_config: dict[str, Any] | None = Field(None, description=CLEARS)
    rollback_steps: text(MAX["rollback_steps"]) | None = Field(None, description=CLEARS)  # type: ignore[valid-type]
    rollback_owner: text(MAX["rollback_owner"]) | None = Field(None, description=CLEARS)  # type: ignore[valid-type]
    rollback_verification: text(MAX["rollback_verification"]) | None = Field(None, description=CLEARS)  # type: ignore[valid-type]
    approvals_required: Approvals | None = Field(None, description=f"{APPROVALS_HELP}; {CLEARS}")


CONDITIONS_HELP = "required with approved_with_conditions"
OVERRIDE_HELP = "required to approve over a failing gate"


class SignoffIn(Strict):
    verdict: Literal[tuple(signing.SIGN_VERDICTS)]  # type: ignore[valid-type]
    comment: Annotated[str, Field(pattern=NON_BLANK, max_length=MAX["comment"])]
    conditions: text(MAX["conditions"]) = Field("", description=CONDITIONS_HELP)  # type: ignore[valid-type]
    override_reason: text(MAX["override_reason"]) = Field("", description=OVERRIDE_HELP)  # type: ignore[valid-type]


class DecisionOut(Open):
    id: int
    title: str
    status: str
    proposal: str
    experiment_id: int
    traffic_class: str
    created_at: str
    url: str


class DecisionDetailOut(DecisionOut):
    rationale: str
    gate: dict[str, Any]
    checklist: list[Any]
    rollback: dict[str, Any]
    signoff: dict[str, Any] | None = Field(description="the signature that signed it (the last one)")
    signoffs: list[dict[str, Any]] = Field(description="every signature, in order")
    approvals_required: int
    approvals_count: int
    archive: dict[str, Any] | None
    audit: list[dict[str, Any]]


class DecisionListOut(Open):
    decisions: list[DecisionOut]


def _signer_guard(request: HttpRequest) -> None:
    """Who may sign this decision comes before whether the body is well formed: a drafter,
    editor or submitter gets 403 whatever they send (runs before the body is parsed)."""
    raw = str((request.resolver_match.kwargs if request.resolver_match else {}).get("id", ""))
    if not raw.isdigit() or int(raw) > MAX_ID:
        return  # the path's own validation answers
    decision = row_or_404(Decision.objects, int(raw), what="decision", user=request.user)
    refusal = selectors.decision_sign_refusal(decision=decision, user=request.user)
    if refusal:
        raise PermissionDenied(refusal)


def _get(request: HttpRequest, pk: int) -> Decision:
    rows = Decision.objects.select_related("experiment__trace", "candidate_arm__config", "created_by")
    return row_or_404(rows, pk, what="decision", user=request.user)


@router.get(
    "/decisions",
    response={200: DecisionListOut, **errors(400)},
    url_name="api-decisions",
    summary="List decisions",
)
def decisions_index(
    request: HttpRequest,
    status: Literal[tuple(Decision.Status.values)] | None = Query(None),  # type: ignore[valid-type]
    model: text(500) | None = Query(None, description="target model"),  # type: ignore[valid-type]
):
    qs = selectors.decisions_list(user=request.user, model=model or None, status=status or None)
    return {"decisions": [decision_payload(d, full=False) for d in qs[:500]]}


def _refused(field: str, message: str) -> ApiError:
    return ApiError(400, "field errors", details={field: [message]})


@router.post(
    "/decisions",
    response={201: DecisionDetailOut, **errors(400, 409)},
    url_name="api-decisions",
    summary="Draft a decision from an experiment (and a slice policy): the gate is computed from its comparison",
    **access(capability=roles.DRAFT_DECISION),
)
def decision_create_api(request: HttpRequest, payload: DecisionCreateIn):
    """Needs permission accounts.draft_decision in the experiment's team. Another team's
    experiment, policy or decision is "no such" here, as on the form. 409 while the experiment's
    stored comparison is of another schema version or shape (recompute it)."""
    experiment = (
        teams.visible(Experiment.objects.select_related("trace"), request.user)
        .filter(pk=payload.experiment)
        .first()
    )
    if experiment is None:
        raise _refused("experiment", f"no experiment with id {payload.experiment}")
    teams.require(
        request.user, roles.DRAFT_DECISION, team_id=experiment.trace.team_id, what="draft decisions here"
    )
    arm = None
    if payload.candidate_arm:
        arm = experiment.arms.filter(label=payload.candidate_arm, is_baseline=False).first()
        if arm is None:
            labels = ", ".join(experiment.arms.filter(is_baseline=False).values_list("label", flat=True))
            raise _refused(
                "candidate_arm",
                f"no candidate arm {payload.candidate_arm!r} in experiment {experiment.pk}: {labels}",
            )
    policy, policy_ref = None, ""
    if payload.slice_policy is not None:
        fitted = SlicePolicy.objects.filter(pk=payload.slice_policy, experiment=experiment).first()
        if fitted is None:
            raise _refused(
                "slice_policy", f"no policy {payload.slice_policy} fitted on experiment {experiment.pk}"
            )
        policy, policy_ref = policy_export(policy=fitted), f"/policies/{fitted.pk}/"
    supersedes = None
    if payload.supersedes is not None:
        signed = Decision.objects.filter(
            status__in=Decision.SIGNED_STATUSES, experiment__trace__team_id=experiment.trace.team_id
        )
        supersedes = signed.filter(pk=payload.supersedes).first()
        if supersedes is None:
            raise _refused("supersedes", f"no signed decision {payload.supersedes} of this experiment's team")
    try:
        decision = services.decision_create(
            experiment=experiment,
            author=request.user,
            title=payload.title,
            proposal=payload.proposal,
            candidate_arm=arm,
            traffic_class=payload.traffic_class,
            rationale=payload.rationale,
            policy_ref=policy_ref,
            policy=policy,
            supersedes=supersedes,
            comparison=selectors.decision_comparison(experiment=experiment),
            approvals_required=payload.approvals_required,
        )
    except ComparisonSchemaError as exc:
        raise ApiError(409, str(exc)) from None
    except services.DecisionError as exc:
        raise ApiError(400, str(exc)) from None
    return Status(201, decision_payload(_get(request, decision.pk), full=True))


@router.post(
    "/decisions/{id}/submit",
    response={200: DecisionDetailOut, **errors(400, 404, 409)},
    url_name="api-decision-submit",
    summary="Submit a draft for sign-off (once its rationale, checklist and rollback plan are complete)",
    **access(capability=roles.DRAFT_DECISION, path_object=Decision),
)
def decision_submit_api(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    """Needs permission accounts.draft_decision. 400 listing what is missing (``details.problems``),
    409 when it is no longer a draft."""
    decision = _get(request, id)
    try:
        services.decision_submit(decision=decision, actor=request.user)
    except services.DecisionError as exc:
        if "only a draft" in str(exc):
            raise ApiError(409, str(exc)) from None
        raise ApiError(
            400, str(exc), details={"problems": services.decision_submit_problems(decision=decision)}
        ) from None
    return decision_payload(_get(request, id), full=True)


@router.get(
    "/decisions/{id}",
    response={200: DecisionDetailOut, **errors(400, 404)},
    url_name="api-decision",
    summary="A decision: gate, checklist, rollback plan, sign-off, archive hashes",
)
def decision_item(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    return decision_payload(_get(request, id), full=True)


@router.patch(
    "/decisions/{id}",
    response={200: DecisionDetailOut, **errors(400, 404, 409)},
    url_name="api-decision",
    summary="Edit a draft",
    **access(capability=roles.DRAFT_DECISION, path_object=Decision),
)
def decision_edit(request: HttpRequest, id: Path[Id], payload: DecisionPatchIn):  # type: ignore[valid-type]
    """Needs permission accounts.draft_decision. 409 once the decision is submitted or signed, and
    while the experiment's stored comparison is of another schema version or shape (the message
    says to recompute it)."""
    decision = _get(request, id)
    changes = payload.model_dump(exclude_unset=True, mode="json")
    try:
        decision = services.decision_update(
            decision=decision,
            actor=request.user,
            changes=changes,
            comparison=selectors.decision_comparison(experiment=decision.experiment),
        )
    except ComparisonSchemaError as exc:
        raise ApiError(409, str(exc)) from None
    except services.DecisionError as exc:
        raise ApiError(409 if "only a draft" in str(exc) else 400, str(exc)) from None
    return decision_payload(_get(request, decision.pk), full=True)


@router.post(
    "/decisions/{id}/signoff",
    response={200: DecisionDetailOut, **errors(400, 404, 409)},
    url_name="api-decision-signoff",
    summary="Sign off a submitted decision (approver only)",
    **access(capability=roles.SIGN_DECISION, before_body=_signer_guard),
)
def decision_signoff(request: HttpRequest, id: Path[Id], payload: SignoffIn):  # type: ignore[valid-type]
    """Needs permission accounts.sign_decision; an approver cannot sign what they drafted, edited or
    submitted (403), nor sign twice (400). Below the decision's ``approvals_required`` an approval
    is recorded and the decision stays submitted (``approvals_count`` says how far); the last one
    (or a rejection) signs and archives it; after that, 409 naming who signed."""
    decision = _get(request, id)
    try:
        decision = signing.decision_sign(
            decision=decision,
            signer=request.user,
            verdict=payload.verdict,
            comment=payload.comment,
            conditions=payload.conditions,
            override_reason=payload.override_reason,
        )
    except services.DecisionError as exc:
        raise ApiError(400, str(exc)) from None
    return decision_payload(_get(request, decision.pk), full=True)
