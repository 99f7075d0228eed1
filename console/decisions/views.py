"""Pages: list, draft, edit, submit, sign, exports, archive. Views parse input and call services."""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from console.accounts import roles, teams
from console.accounts.access import capability_required
from console.analysis.comparison.schema import ComparisonSchemaError
from console.decisions import export, pdf, selectors, services, signing
from console.decisions.forms import ArchiveFilterForm, DecisionCreateForm, DecisionEditForm, SignOffForm
from console.decisions.gate.constants import TITLES
from console.decisions.models import Decision, FrozenDecisionError
from console.errors import Conflict
from console.experiments.models import Experiment
from console.exports import site_path
from console.listing import listing
from console.policies.selectors import policy_export
from workers.engines.redaction import config_redact, document_redact


def comparison_url(experiment_id: int) -> str:
    """The comparison page of an experiment (the JSON summary until the page exists)."""
    for name in ("analysis:comparison", "experiments:comparison"):
        try:
            return reverse(name, args=[experiment_id])
        except NoReverseMatch:
            continue
    return f"/api/experiments/{experiment_id}/comparison"


def _decision(request: HttpRequest, pk: int) -> Decision:
    """A decision of the user's teams (404 otherwise, another team's included)."""
    return teams.visible_get(
        Decision.objects.select_related("experiment__trace", "candidate_arm__config", "created_by", "supersedes"),
        request.user,
        pk=pk,
        what="decision",
    )


def _may(request: HttpRequest, perm: str, decision: Decision) -> bool:
    return teams.can(request.user, perm, team_id=decision.experiment.trace.team_id)


DECISION_SORTS = {
    "id": "pk",
    "title": "title",
    "status": "status",
    "experiment": "experiment__name",
    "created": "created_at",
}


@require_safe
def decision_list(request: HttpRequest):
    open_decisions = selectors.decisions_list(user=request.user).filter(
        status__in=(Decision.Status.DRAFT, Decision.Status.SUBMITTED)
    )
    context = {
        "open_decisions": listing(request, open_decisions, sorts=DECISION_SORTS, default="-created"),
        "recent_signed": selectors.decisions_list(user=request.user, archived_only=True)[:10],
        "experiments": listing(
            request,
            teams.visible(Experiment.objects.all(), request.user),
            sorts={"name": "name", "status": "status", "created": "created_at"},
            default="-created",
            per_page=10,
            prefix="experiments_",
        ),
        "can_draft": request.user.has_perm(roles.DRAFT_DECISION),
    }
    return render(request, "decisions/list.html", context)


@capability_required(roles.DRAFT_DECISION)
@require_http_methods(["GET", "POST"])
def decision_new(request: HttpRequest):
    if request.method == "POST":
        form = DecisionCreateForm(request.POST, user=request.user)
        if form.is_valid():
            data = form.cleaned_data
            slice_policy = data.get("slice_policy")
            policy_ref = data.get("policy_ref") or ""
            policy = None
            if slice_policy is not None:
                policy = policy_export(policy=slice_policy)
                policy_ref = f"/policies/{slice_policy.pk}/"
            try:
                decision = services.decision_create(
                    experiment=data["experiment"],
                    author=request.user,
                    title=data.get("title") or "",
                    proposal=data["proposal"],
                    candidate_arm=data.get("candidate_arm"),
                    traffic_class=data["traffic_class"],
                    rationale=data.get("rationale") or "",
                    policy_ref=policy_ref,
                    policy=policy,
                    supersedes=data.get("supersedes"),
                    comparison=selectors.decision_comparison(experiment=data["experiment"]),
                    approvals_required=data.get("approvals_required"),
                )
            except (services.DecisionError, ComparisonSchemaError) as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, "Draft created: the gate is computed from the comparison.")
                return redirect("decisions:detail", pk=decision.pk)
    else:
        initial = {
            k: request.GET[k] for k in ("experiment", "supersedes") if request.GET.get(k, "").isdigit()
        }
        form = DecisionCreateForm(initial=initial, user=request.user)
    return render(request, "decisions/new.html", {"form": form})


@require_safe
def decision_detail(request: HttpRequest, pk: int):
    return _detail_page(request, _decision(request, pk))


def _detail_page(
    request: HttpRequest, decision: Decision, *, sign_form: SignOffForm | None = None, status: int = 200
) -> HttpResponse:
    """The decision page; ``sign_form`` is a refused sign-off, shown with what was typed."""
    record = getattr(decision, "archive", None) if decision.is_signed else None
    approvals = selectors.decision_approvals(decision=decision)
    sign_refusal = (
        selectors.decision_sign_refusal(decision=decision, user=request.user)
        if decision.status == Decision.Status.SUBMITTED and _may(request, roles.SIGN_DECISION, decision)
        else None
    )
    signed_by_you = any(s.signer_id == request.user.pk for s in approvals["signatures"])
    can_sign = (
        _may(request, roles.SIGN_DECISION, decision)
        and decision.status == Decision.Status.SUBMITTED
        and sign_refusal is None
        and not signed_by_you
    )
    context = {
        "decision": decision,
        "gate": decision.gate or {},
        "record": record,
        "signoff": decision.signoff,
        "approvals": approvals,
        "signed_by_you": signed_by_you,
        "events": selectors.decision_events(decision=decision),
        "superseded_by": selectors.decision_superseded_by(decision=decision),
        "comparison_url": comparison_url(decision.experiment_id),
        "revert_config_json": json.dumps(
            config_redact(decision.rollback_revert_config), indent=2, sort_keys=True
        ),
        "checklist": document_redact(decision.checklist),
        "policy_json": json.dumps(document_redact(decision.policy), indent=2, sort_keys=True, default=str)
        if decision.policy
        else "",
        "policy_link": site_path(decision.policy_ref),
        "can_edit": _may(request, roles.DRAFT_DECISION, decision) and decision.status == Decision.Status.DRAFT,
        "can_sign": can_sign,
        "sign_refusal": sign_refusal,
        "override_needed": [
            TITLES.get(key, key)
            for key in services.override_required(decision=decision, verdict=Decision.Status.APPROVED)
        ],
        "submit_problems": services.decision_submit_problems(decision=decision)
        if decision.status == Decision.Status.DRAFT
        else [],
        "sign_form": sign_form or SignOffForm(),
        **teams.capabilities_in(request.user, decision.experiment.trace.team_id),
    }
    return render(request, "decisions/detail.html", context, status=status)


@capability_required(roles.DRAFT_DECISION)
@require_http_methods(["GET", "POST"])
def decision_edit(request: HttpRequest, pk: int):
    decision = _decision(request, pk)
    teams.require(request.user, roles.DRAFT_DECISION, team_id=decision.experiment.trace.team_id, what="edit decisions")
    if decision.status != Decision.Status.DRAFT:
        messages.error(
            request, f"Decision #{decision.pk} is {decision.get_status_display()}: it cannot be edited."
        )
        return (
            redirect("decisions:detail", pk=decision.pk)
            if request.method == "GET"
            else _refuse_edit(decision)
        )
    if request.method == "POST":
        form = DecisionEditForm(request.POST, decision=decision)
        if form.is_valid():
            try:
                services.decision_update(
                    decision=decision,
                    actor=request.user,
                    changes=form.changes(),
                    comparison=selectors.decision_comparison(experiment=decision.experiment),
                )
            except (services.DecisionError, ComparisonSchemaError) as exc:
                form.add_error(None, str(exc))
            except FrozenDecisionError as exc:
                messages.error(request, str(exc))
                return _refuse_edit(decision)
            else:
                messages.success(request, "Saved; gate and checklist recomputed.")
                return redirect("decisions:detail", pk=decision.pk)
    else:
        form = DecisionEditForm(initial=DecisionEditForm.initial_for(decision), decision=decision)
    context = {"decision": decision, "form": form}
    return render(request, "decisions/edit.html", context | teams.capabilities_in(request.user, decision.experiment.trace.team_id))


def _refuse_edit(decision: Decision) -> HttpResponse:
    return HttpResponse(
        f"decision #{decision.pk} is {decision.status}: it cannot be edited",
        status=409,
        content_type="text/plain",
    )


@capability_required(roles.DRAFT_DECISION)
@require_POST
def decision_submit(request: HttpRequest, pk: int):
    decision = _decision(request, pk)
    teams.require(request.user, roles.DRAFT_DECISION, team_id=decision.experiment.trace.team_id, what="submit decisions")
    try:
        services.decision_submit(decision=decision, actor=request.user)
    except services.DecisionError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Submitted for sign-off.")
    return redirect("decisions:detail", pk=decision.pk)


@capability_required(roles.SIGN_DECISION)
@require_POST
def decision_sign(request: HttpRequest, pk: int):
    decision = _decision(request, pk)
    teams.require(request.user, roles.SIGN_DECISION, team_id=decision.experiment.trace.team_id, what="sign decisions")
    if decision.status == Decision.Status.SUBMITTED:
        # Separation of duties before the form: a participant is refused whatever they send.
        refusal = selectors.decision_sign_refusal(decision=decision, user=request.user)
        if refusal:
            raise PermissionDenied(refusal)
    form = SignOffForm(request.POST)
    if not form.is_valid():
        # The page again with what was typed and the errors by their fields (nothing stored).
        messages.error(request, "A sign-off needs a verdict and a comment.")
        return _detail_page(request, decision, sign_form=form, status=400)
    try:
        decision = signing.decision_sign(decision=decision, signer=request.user, **form.cleaned_data)
    except PermissionDenied:
        raise  # 403, its message on the page (templates/403.html)
    except (Conflict, FrozenDecisionError) as exc:
        messages.error(request, str(exc))  # signed meanwhile: the page shows by whom
    except services.DecisionError as exc:
        # What was typed stays in the form, the problem above it (e.g. a missing override reason).
        form.add_error(None, str(exc))
        decision.refresh_from_db()
        return _detail_page(request, decision, sign_form=form, status=400)
    else:
        if decision.is_signed:
            messages.success(request, "Signed and archived.")
        else:
            label = selectors.decision_approvals(decision=decision)["label"]
            messages.success(request, f"Signature recorded: {label}; another approver must sign.")
    return redirect("decisions:detail", pk=decision.pk)


@require_safe
def decision_export_markdown(request: HttpRequest, pk: int):
    decision = _decision(request, pk)
    body = export.decision_markdown(decision=decision)
    services.decision_export_record(decision=decision, actor=request.user, fmt="markdown")
    response = HttpResponse(body, content_type="text/markdown; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="decision-{decision.pk}.md"'
    return response


@require_safe
def decision_export_pdf(request: HttpRequest, pk: int):
    decision = _decision(request, pk)
    body = pdf.decision_pdf(decision=decision)
    services.decision_export_record(decision=decision, actor=request.user, fmt="pdf")
    response = HttpResponse(body, content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="decision-{decision.pk}.pdf"'
    return response


@require_safe
def decision_bundle(request: HttpRequest, pk: int):
    decision = _decision(request, pk)
    body = selectors.decision_bundle_text(decision=decision)
    services.decision_export_record(decision=decision, actor=request.user, fmt="bundle")
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="decision-{decision.pk}-bundle.json"'
    return response


@require_safe
def archive_list(request: HttpRequest):
    form = ArchiveFilterForm(request.GET or None)
    filters = form.cleaned_data if form.is_valid() else {}
    archived = selectors.decisions_list(
        user=request.user,
        model=filters.get("model") or None,
        status=filters.get("status") or None,
        date_from=filters.get("date_from"),
        date_to=filters.get("date_to"),
        archived_only=True,
    ).select_related("archive").annotate(**selectors.final_signature_columns())
    decisions = listing(
        request,
        archived,
        sorts={
            "sequence": "archive__sequence",
            "title": "title",
            "model": "experiment__target_model",
            "status": "status",
            "signer": "final_signer",
            "signed": "final_signed_at",
        },
        default="-sequence",
    )
    context = {"form": form, "decisions": decisions, "verification": selectors.archive_verify()}
    return render(request, "decisions/archive.html", context)
