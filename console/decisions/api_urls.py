from django.urls import path

from console.decisions import api

urlpatterns = [
    path("decisions", api.decisions_index, name="api-decisions"),
    path("decisions/<int:pk>", api.decision_item, name="api-decision"),
    path("decisions/<int:pk>/signoff", api.decision_signoff, name="api-decision-signoff"),
]
