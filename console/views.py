import json

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_safe

from console.accounts import teams
from console.api import api
from console.decisions.models import Decision
from console.experiments.models import Experiment
from console.traces.models import Trace


@require_safe
def home(request: HttpRequest):
    user = request.user  # every list is the user's teams' (console/accounts/teams.py)
    experiments = list(teams.visible(Experiment.objects.order_by("-created_at"), user)[:5])
    context = {
        "traces": teams.visible(Trace.objects.order_by("-created_at"), user)[:5],
        "answers": [(e, _latest_decision(e)) for e in experiments],
        "decisions": teams.visible(Decision.objects.order_by("-created_at"), user)[:5],
        "no_team": not teams.team_ids(user),
    }
    return render(request, "home.html", context)


def _latest_decision(experiment: Experiment) -> Decision | None:
    """The answer recorded for ``experiment``: its latest signed decision, else its latest draft."""
    decisions = (
        Decision.objects.filter(experiment=experiment)
        .select_related("candidate_arm")
        .prefetch_related("signoffs")
    )
    signed = decisions.filter(status__in=Decision.SIGNED_STATUSES).order_by("-created_at").first()
    return signed or decisions.order_by("-created_at").first()


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
