import json

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_safe

from console.api import api
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


@require_safe
def api_docs(request: HttpRequest):
    """The API's interactive documentation: django-ninja's Swagger UI page over /api/openapi.json,
    its scripts and styles served from this console's static files (no CDN: the console works
    offline, and the page keeps the Content-Security-Policy of script-src 'self')."""
    settings = {"layout": "BaseLayout", "deepLinking": True, "url": reverse("openapi")}
    context = {"swagger_settings": json.dumps(settings), "api": api, "add_csrf": True}
    return render(request, "ninja/swagger.html", context)
