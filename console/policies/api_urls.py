from django.shortcuts import get_object_or_404
from django.urls import path

from console.api import ApiError, api_endpoint
from console.experiments.models import Experiment
from console.policies.models import SlicePolicy
from console.policies.selectors import policy_export, policy_list


@api_endpoint(
    path="/api/policies/{id}", methods={"GET": "A slice policy: its rules, train and holdout scores"}
)
def policy(request, pk: int):
    item = get_object_or_404(SlicePolicy.objects.select_related("created_by"), pk=pk)
    return policy_export(policy=item) | {
        "rules": (item.rules or {}).get("rules", []),
        "train_scores": item.train_scores,
        "holdout_scores": item.holdout_scores,
    }


@api_endpoint(
    path="/api/policies", methods={"GET": "Slice policies, optionally of one experiment (?experiment=ID)"}
)
def policies(request):
    experiment = None
    if request.GET.get("experiment"):
        try:
            experiment = get_object_or_404(Experiment, pk=int(request.GET["experiment"]))
        except ValueError:
            raise ApiError(400, "experiment must be an id") from None
    return [policy_export(policy=p) for p in policy_list(experiment=experiment)[:500]]


urlpatterns = [
    path("policies", policies, name="api-policies"),
    path("policies/<int:pk>", policy, name="api-policy"),
]
