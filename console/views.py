from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from console.decisions.models import Decision
from console.experiments.models import Experiment
from console.traces.models import Trace


@require_safe
def home(request: HttpRequest):
    context = {
        "traces": Trace.objects.order_by("-created_at")[:5],
        "experiments": Experiment.objects.order_by("-created_at")[:5],
        "decisions": Decision.objects.order_by("-created_at")[:5],
    }
    return render(request, "home.html", context)


@require_safe
def healthz(request: HttpRequest):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"ok": True})
