from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from console import numbers
from console.accounts import teams
from console.accounts.access import capability_required
from console.accounts.roles import RUN_EXPERIMENT
from console.analysis.plots import fig_html
from console.experiments.models import Experiment
from console.jsonutil import canonical_json
from console.listing import listing
from console.policies import deploy, plots, schedule_page
from console.policies import features as policy_features
from console.policies import pairs as policy_pairs
from console.policies import words as policy_words
from console.policies.forms import PolicyFitForm
from console.policies.models import SlicePolicy
from console.policies.selectors import (
    PolicyInputError,
    policy_deployment,
    policy_export,
    policy_holdout,
    policy_list,
    policy_page,
)
from console.policies.services import policy_adopt, policy_fit
from console.words import metric_words


def _experiment_from(request, value: str | None) -> Experiment | None:
    if not value:
        return None
    try:
        return teams.visible_get(Experiment.objects.select_related("trace"), request.user, pk=int(value))
    except ValueError:
        raise Http404("no such experiment") from None


@require_safe
def policy_list_view(request):
    experiment = _experiment_from(request, request.GET.get("experiment"))
    return render(
        request,
        "policies/list.html",
        {
            "experiment": experiment,
            "policies": listing(
                request,
                policy_list(user=request.user, experiment=experiment),
                sorts={
                    "id": "pk",
                    "experiment": "experiment__name",
                    "metric": "metric",
                    "created": "created_at",
                },
                default="-created",
            ),
            "can_fit": request.user.has_perm(RUN_EXPERIMENT),
        },
    )


@capability_required(RUN_EXPERIMENT)
@require_http_methods(["GET", "POST"])
def policy_new(request):
    experiment = _experiment_from(request, request.POST.get("experiment") or request.GET.get("experiment"))
    if experiment is None:
        done = Experiment.objects.filter(
            status=Experiment.Status.DONE, trace__team_id__in=teams.team_ids(request.user, capability=RUN_EXPERIMENT)
        )
        return render(request, "policies/new.html", {"experiments": done[:200]})
    teams.require(request.user, RUN_EXPERIMENT, team_id=experiment.trace.team_id, what="fit policies")
    form = PolicyFitForm(request.POST or None, experiment=experiment)
    if request.method == "POST" and form.is_valid():
        try:
            policy = policy_fit(**form.service_kwargs(), created_by=request.user)
        except (policy_features.FeatureError, PolicyInputError) as exc:
            form.add_error(None, str(exc))
        except PermissionDenied:
            raise
        else:
            messages.success(request, f"Policy {policy.pk} fitted on train, scored on holdout.")
            return redirect("policies:detail", pk=policy.pk)
    return render(request, "policies/new.html", {"experiment": experiment, "form": form})


@require_safe
def policy_detail(request, pk: int):
    policy = teams.visible_get(
        SlicePolicy.objects.select_related("experiment__trace", "created_by"), request.user, pk=pk
    )
    page = policy_page(policy=policy)
    train, holdout = policy.train_scores or {}, policy.holdout_scores or {}
    summary_rows = [
        {"label": "policy routing", "train": train.get("policy"), "holdout": holdout.get("policy")}
    ]
    for arm in policy.arms:
        summary_rows.append(
            {
                "label": f"all on ({arm})",
                "train": (train.get("all_on") or {}).get(arm),
                "holdout": (holdout.get("all_on") or {}).get(arm),
            }
        )
        summary_rows.append(
            {
                "label": f"policy − all on ({arm})",
                "train": (train.get("policy_vs_all_on") or {}).get(arm),
                "holdout": (holdout.get("policy_vs_all_on") or {}).get(arm),
            }
        )
    summary_rows.append(
        {"label": "all off (baseline)", "train": train.get("all_off"), "holdout": holdout.get("all_off")}
    )
    by_load = []
    for level, scores in (holdout.get("by_load") or {}).items():
        by_load.append(
            {
                "load": level,
                "share_on": numbers.rate(scores.get("share_on")),
                "policy": scores.get("policy"),
                "all_on": [(arm, (scores.get("all_on") or {}).get(arm)) for arm in policy.arms],
                "regressions": scores.get("regressions"),
                "lost_successes": scores.get("lost_successes"),
            }
        )
    # an empty axis says nothing: without an enabling rule the page says why there is no chart
    enabling = [r for r in page["rules"] if r.get("arm")]
    figure = fig_html(plots.benefit_per_rule(page["rules"]), div_id="benefit-per-rule") if enabling else ""
    try:
        deployment, deploy_error = policy_deployment(policy=policy), ""
    except deploy.DeployError as exc:
        deployment, deploy_error = None, str(exc)
    return render(
        request,
        "policies/detail.html",
        {
            "policy": policy,
            "rules": page["rules"],
            "summary_rows": summary_rows,
            "train": train,
            "holdout": holdout,
            "share_on": {
                "train": numbers.rate(train.get("share_on")),
                "holdout": numbers.rate(holdout.get("share_on")),
            },
            "overfitting_reasons": [
                policy_words.reason_text(r) for r in (policy.overfitting or {}).get("reasons", [])
            ],
            "metric_label": policy_pairs.METRICS[policy.metric][2]
            if policy.metric in policy_pairs.METRICS
            else policy_words.metric_text(policy.metric),
            "document_json": json.dumps(policy.rules, indent=2, sort_keys=True),
            "export_json": json.dumps(policy_export(policy=policy), indent=2, sort_keys=True),
            "figure": figure,
            "by_load": by_load,
            "considered": page["considered"],
            "n_considered": page["n_considered"],
            "undecided": page["undecided"],
            "holdout_view": policy_holdout(policy=policy),
            "can_fit": teams.can(request.user, RUN_EXPERIMENT, team_id=policy.experiment.trace.team_id),
            "pools": deploy.serve_lines(deployment) if deployment else [],
            "routing": deployment,
            "routing_table": deployment.table[:200] if deployment else [],
            "deploy_error": deploy_error,
        },
    )


@capability_required(RUN_EXPERIMENT)
@require_POST
def policy_adopt_view(request, pk: int):
    """The holdout warning's offer: store the simpler rule the holdout preferred (``alternative``,
    e.g. ``all_on:<arm>``) as a new policy. 400 naming the field for one this policy did not score."""
    policy = teams.visible_get(SlicePolicy.objects.select_related("experiment__trace"), request.user, pk=pk)
    teams.require(request.user, RUN_EXPERIMENT, team_id=policy.experiment.trace.team_id, what="adopt policies")
    alternative = request.POST.get("alternative", "")
    if not alternative or len(alternative) > 300 or "\x00" in alternative:
        return HttpResponse(
            "alternative: required, one of the policy's scored alternatives (all_off or all_on:<arm>)\n",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    try:
        adopted = policy_adopt(policy=policy, alternative=alternative, created_by=request.user)
    except (PolicyInputError, policy_features.FeatureError) as exc:
        return HttpResponse(f"{exc}\n", status=400, content_type="text/plain; charset=utf-8")
    messages.success(
        request,
        f"Policy {adopted.pk}: {policy_words.alternative_text(alternative)}, chosen on policy {policy.pk}'s holdout.",
    )
    return redirect("policies:detail", pk=adopted.pk)


@require_safe
def policy_rules_json(request, pk: int):
    policy = teams.visible_get(SlicePolicy, request.user, pk=pk)
    response = HttpResponse(canonical_json(policy.rules), content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="slice-policy-{policy.pk}.json"'
    response["X-Content-SHA256"] = policy.rules_sha256
    return response


def _deployment_or_409(policy: SlicePolicy) -> deploy.Deployment | HttpResponse:
    try:
        return policy_deployment(policy=policy)
    except deploy.DeployError as exc:
        return HttpResponse(
            f"policy {policy.pk} cannot be deployed: {exc}\n",
            status=409,
            content_type="text/plain; charset=utf-8",
        )


def _download(body: str, *, content_type: str, filename: str, policy: SlicePolicy) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Rules-SHA256"] = policy.rules_sha256
    return response


@require_safe
def policy_serve_sh(request, pk: int):
    """One ``vllm serve`` line per pool the rules need (shell-quoted)."""
    policy = teams.visible_get(SlicePolicy.objects.select_related("experiment"), request.user, pk=pk)
    deployment = _deployment_or_409(policy)
    if isinstance(deployment, HttpResponse):
        return deployment
    return _download(
        deploy.serve_script(deployment),
        content_type="text/x-shellscript; charset=utf-8",
        filename=f"slice-policy-{policy.pk}-vllm-serve.sh",
        policy=policy,
    )


@require_safe
def policy_router_yaml(request, pk: int):
    """The LiteLLM proxy config: one tagged deployment per pool (docs/policies.md)."""
    policy = teams.visible_get(SlicePolicy.objects.select_related("experiment"), request.user, pk=pk)
    deployment = _deployment_or_409(policy)
    if isinstance(deployment, HttpResponse):
        return deployment
    return _download(
        deploy.router_yaml(deployment),
        content_type="application/yaml; charset=utf-8",
        filename=f"slice-policy-{policy.pk}-litellm.yaml",
        policy=policy,
    )


@require_safe
def experiment_schedule_view(request, pk: int):
    """The experiment's draft length by batch size: the schedule, its chart and its evidence."""
    experiment = teams.visible_get(Experiment, request.user, pk=pk)
    view = schedule_page.experiment_schedule(experiment=experiment)
    context: dict = {"experiment": experiment, "view": view, "s": view.schedule, "naive": view.naive}
    if view.schedule is not None:
        s = view.schedule
        context["endpoint"] = metric_words(s.metric, s.stat)
        context["loads"] = [*s.loads, *s.unplaced]
        if view.naive is not None:
            context["naive_schedule"] = json.dumps([list(b) for b in view.naive.schedule])
            context["naive_differs"] = view.naive.schedule != s.schedule
        context["figure"] = fig_html(schedule_page.schedule_figure(view.schedule), div_id="schedule-chart")
        if view.schedule.speculative_config is not None:
            context["config_json"] = json.dumps(view.schedule.speculative_config, indent=2)
    return render(request, "policies/schedule.html", context)


@require_safe
def experiment_schedule_json(request, pk: int):
    """The schedule as JSON: the speculative_config to give vLLM and the evidence behind each band."""
    experiment = teams.visible_get(Experiment, request.user, pk=pk)
    document = schedule_page.schedule_document(schedule_page.experiment_schedule(experiment=experiment))
    response = HttpResponse(json.dumps(document, indent=2), content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="experiment-{experiment.pk}-batch-schedule.json"'
    return response
