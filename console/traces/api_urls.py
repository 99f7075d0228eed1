from django.urls import path

from console.traces import api

urlpatterns = [
    path("traces", api.traces_api, name="traces-api"),
    path("traces/<int:pk>", api.trace_api, name="trace-api"),
    path("traces/<int:pk>/requests", api.trace_requests_api, name="trace-requests-api"),
]
