from django.shortcuts import get_object_or_404
from django.urls import path

from console.analysis.selectors import comparison_for_experiment
from console.api import ApiError, api_endpoint
from console.experiments.models import Experiment


@api_endpoint(
    path="/api/experiments/{id}/comparison", methods={"GET": "The comparison summary of an experiment"}
)
def comparison(request, pk: int):
    experiment = get_object_or_404(Experiment, pk=pk)
    summary = comparison_for_experiment(experiment=experiment)
    if summary is None:
        raise ApiError(409, "no finished baseline run yet: nothing to compare")
    return summary


urlpatterns = [path("experiments/<int:pk>/comparison", comparison, name="api-comparison")]
