"""Rollout pages: start one from an approved decision, watch it live (each trigger's last look
against its threshold, production against the prediction, the events), act on it, and download
the triggers as Argo Rollouts or Flagger YAML."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from console.accounts import roles, teams
from console.accounts.access import capability_required
from console.decisions.models import Decision
from console.rollouts import selectors, services
from console.rollouts.forms import RolloutActForm, RolloutStartForm
from console.rollouts.models import Rollout


def _decision(request: HttpRequest, pk: int) -> Decision:
    return teams.visible_get(Decision.objects.select_related("experiment__trace"), request.user, pk=pk, what="decision")


def _rollout(request: HttpRequest, decision: int, pk: int) -> Rollout:
    rows = Rollout.objects.select_related("decision__experiment__trace", "started_by").filter(decision_id=decision)
    return teams.visible_get(rows, request.user, pk=pk, what="rollout")


def _may_operate(request: HttpRequest, decision: Decision) -> bool:
    return teams.can(request.user, roles.DRAFT_DECISION, team_id=decision.experiment.trace.team_id)


@capability_required(roles.DRAFT_DECISION)
@require_http_methods(["GET", "POST"])
def rollout_new(request: HttpRequest, decision: int):
    item = _decision(request, decision)
    teams.require(request.user, roles.DRAFT_DECISION, team_id=item.experiment.trace.team_id, what="start rollouts")
    form = RolloutStartForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            rollout = services.rollout_start(decision=item, actor=request.user, **data)
        except services.RolloutError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, str(exc))
        else:
            messages.success(request, "Rollout started: the triggers are looked at every window.")
            return redirect("rollouts:detail", decision=item.pk, pk=rollout.pk)
    status = 400 if request.method == "POST" else 200
    context = {"decision": item, "form": form, "registered": bool(settings.SPECREVIEW_PROMETHEUS)}
    return render(request, "rollouts/new.html", context, status=status)


@require_safe
def rollout_detail(request: HttpRequest, decision: int, pk: int):
    rollout = _rollout(request, decision, pk)
    context = {
        "rollout": rollout,
        "decision": rollout.decision,
        "rows": selectors.trigger_rows(rollout),
        "events": rollout.events.select_related("actor").exclude(action="looked").order_by("-at", "-id")[:50],
        "looks": rollout.looks.count(),
        "can_operate": _may_operate(request, rollout.decision),
        "act_form": RolloutActForm(),
    }
    return render(request, "rollouts/detail.html", context)


@capability_required(roles.DRAFT_DECISION)
@require_POST
def rollout_act(request: HttpRequest, decision: int, pk: int):
    rollout = _rollout(request, decision, pk)
    if not _may_operate(request, rollout.decision):
        raise PermissionDenied("your role in this team cannot operate its rollouts")
    form = RolloutActForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose pause, resume, stop or rolled back.")
        return redirect("rollouts:detail", decision=decision, pk=pk)
    act, reason = form.cleaned_data["act"], form.cleaned_data["reason"]
    try:
        if act == "pause":
            services.rollout_pause(rollout=rollout, actor=request.user, reason=reason)
        elif act == "resume":
            services.rollout_resume(rollout=rollout, actor=request.user)
        elif act == "stop":
            services.rollout_stop(rollout=rollout, actor=request.user, reason=reason)
        else:
            services.rollout_rolled_back(rollout=rollout, actor=request.user, reason=reason)
    except services.RolloutError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Rollout {act.replace('_', ' ')}.")
    return redirect("rollouts:detail", decision=decision, pk=pk)


@require_safe
def rollout_export(request: HttpRequest, decision: int, tool: str):
    if tool not in ("argo", "flagger"):
        raise Http404("no such export: argo or flagger")
    item = _decision(request, decision)
    try:
        out = selectors.export_documents(
            decision=item,
            tool=tool,
            prometheus_address=request.GET.get("prometheus_address", "http://prometheus.monitoring:9090"),
            namespace=request.GET.get("namespace", "default"),
            stages=selectors.stages_parse(request.GET.get("stages", selectors.EXPORT_STAGES)),
        )
    except ValueError as exc:
        return HttpResponse(f"# refused: {exc}\n".encode(), status=400, content_type="text/plain; charset=utf-8")
    response = HttpResponse(out["yaml"].encode(), content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="decision-{item.pk}-{tool}.yaml"'
    return response
