from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
from django.conf import settings
from django.contrib import messages
from django.core.cache import cache
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_POST, require_safe

from console.accounts import teams
from console.accounts.access import capability_required, raw_text_allowed, raw_text_shown
from console.accounts.roles import RUN_EXPERIMENT
from console.accounts.services import raw_text_access_record
from console.analysis import comparison_page, plots, slice_view, verdict_words
from console.analysis.comparison.schema import ComparisonSchemaError, Summary, summary_load
from console.analysis.raw_text import results_frame_shown, stored_shown, summary_shown
from console.analysis.retention import trace_purged
from console.analysis.selectors import (
    comparison_for_experiment,
    comparison_progress,
    comparison_state,
    comparison_stored_key,
    comparison_summary_for_experiment,
    experiment_cross_vocabulary_arms,
)
from console.experiments.enqueue import comparison_enqueue
from console.experiments.models import Experiment, Run
from console.exports import csv_cell
from console.results.models import RequestResult
from console.results.selectors import results_frames


def _stored_summary(experiment: Experiment) -> tuple[Summary | None, str | None]:
    """The stored comparison, or None and why when it was stored in another version or shape."""
    try:
        return comparison_summary_for_experiment(experiment=experiment), None
    except ComparisonSchemaError as exc:
        return None, str(exc)


@require_safe
def experiment_comparison(request, pk: int):
    experiment = teams.visible_get(Experiment.objects.select_related("trace"), request.user, pk=pk)
    state = comparison_state(experiment=experiment)
    context: dict = {"experiment": experiment, "state": state, "summary": None, "summary_error": None}
    context |= teams.capabilities_in(request.user, experiment.trace.team_id)
    if state in ("missing", "stale"):
        context["progress"] = comparison_progress(experiment=experiment)
    slice_raw = request.GET.get("slice")
    stored = comparison_stored_key(experiment=experiment)
    cross_vocabulary = experiment_cross_vocabulary_arms(experiment=experiment)
    raw_text = raw_text_allowed(user=request.user, team_id=experiment.trace.team_id)  # part of the key
    # A purge blanks the stored comparison's text under the same key: the body must not outlive it.
    purged = trace_purged(trace=experiment.trace) is not None
    key = _body_key(
        experiment, f"{stored}|{'|'.join(cross_vocabulary)}|raw={raw_text}|purged={purged}", slice_raw
    )
    cached = cache.get(key) if stored else None
    status = 200
    if cached is None:
        summary, context["summary_error"] = _stored_summary(experiment)
        if summary is not None:
            shows_text = raw_text and bool(summary.quality.first_divergences)
            body, body_status = _comparison_body(
                experiment, summary_shown(summary, raw_text=raw_text), slice_raw, cross_vocabulary
            )
            cached = (body, body_status, shows_text)
            cache.set(key, cached, timeout=3600)
    if cached is not None:
        context["summary"] = True  # the page shows the evidence (its body) rather than "not computed"
        context["cross_vocabulary_arms"] = cross_vocabulary
        context["body"], status, shows_text = cached
        if shows_text:  # the first divergences' text
            raw_text_access_record(user=request.user, view="comparison page", object_ref=f"experiment {pk}")
    return render(request, "analysis/comparison.html", context, status=status)


_BODY_TEMPLATE = "analysis/_comparison_body.html"
# Changes with the page's code (its context, its words, its templates included): a shared cache
# (Redis) outlives a deploy. "2": the saturation notice (issue 23); "3": (body, status, shows raw text).
_BODY_SOURCES = (
    comparison_page.__file__,
    verdict_words.__file__,
    plots.__file__,  # the figures (the acceptance heatmaps, issue 23) and the slice views they draw
    slice_view.__file__,
    *(settings.BASE_DIR / "templates" / "analysis" / n for n in ("_comparison_body.html", "_slice_view.html", "_comparison_extras.html")),
)
_BODY_VERSION = "3-" + hashlib.sha256(b"".join(Path(f).read_bytes() for f in _BODY_SOURCES)).hexdigest()[:12]  # type: ignore[arg-type]


def _body_key(experiment: Experiment, stored: str | None, slice_raw: str | None) -> str:
    """The body's cache key: the stored comparison (its key changes with every recomputation) and
    the chosen slice (hashed: a query string is the user's)."""
    # Hashed whole: the stored key holds a timestamp and arm labels (spaces), and memcached refuses those.
    parts = f"{experiment.pk}:{stored or ''}:{slice_raw or ''}"
    return f"comparison-body:{_BODY_VERSION}:{experiment.pk}:{hashlib.sha256(parts.encode()).hexdigest()}"


def _comparison_body(
    experiment: Experiment, summary: Summary, slice_raw: str | None, cross_vocabulary: list[str]
) -> tuple[str, int]:
    """The comparison's evidence as HTML and its status (400 for a slice that does not exist).

    It depends only on the stored comparison and the chosen slice, never on the viewer, so the
    view renders it once and caches it: building its tables and charts from a 9-run,
    10,000-request comparison took 200-300 ms of CPU per view (bench/console_load.py)."""
    context = {
        "experiment": experiment,
        "summary": summary,
        "cross_vocabulary_arms": cross_vocabulary,
    }
    context.update(comparison_page.comparison_context(summary, slice_raw))
    return render_to_string(_BODY_TEMPLATE, context), 400 if context["slice_error"] else 200


@require_POST
@capability_required(RUN_EXPERIMENT)
def experiment_comparison_refresh(request, pk: int):
    """Ask a worker to (re)compute the comparison from the runs finished now."""
    experiment = teams.visible_get(Experiment.objects.select_related("trace"), request.user, pk=pk)
    teams.require(request.user, RUN_EXPERIMENT, team_id=experiment.trace.team_id, what="recompute comparisons")
    comparison_enqueue(experiment_id=experiment.pk)
    messages.success(request, "A worker is computing the comparison from the runs finished now.")
    return redirect("analysis:comparison", pk=experiment.pk)


@require_safe
def run_detail(request, pk: int):
    run = teams.visible_get(Run.objects.select_related("experiment__trace", "arm__config"), request.user, pk=pk)
    requests, _ = results_frames(runs=[run])
    timeline = plots.fig_html(plots.run_timeline(requests), div_id="timeline") if not requests.empty else ""
    rows = list(RequestResult.objects.filter(run=run).select_related("trace_request").order_by("scheduled_s"))
    raw_text = raw_text_allowed(user=request.user, team_id=run.experiment.trace.team_id)
    if raw_text and rows:
        raw_text_access_record(user=request.user, view="run page", object_ref=f"run {run.pk}")
    table = []
    sent = run.prompt_tokens if isinstance(run.prompt_tokens, dict) else {}
    for r in rows:
        r.output_text = raw_text_shown(r.output_text, allowed=raw_text)
        drafted = sum(r.drafted or [])
        prompt = sent.get(r.request_id) or {}
        table.append(
            {
                "r": r,
                "prompt_tokens": prompt.get("n", r.trace_request.prompt_tokens),
                "prompt_source": prompt.get("source", "trace"),
                "ttft": None if r.first_token_s is None else r.first_token_s - r.scheduled_s,
                "e2e": None if r.finish_s is None else r.finish_s - r.scheduled_s,
                "acceptance": sum(r.accepted) / drafted if drafted else None,
            }
        )
    return render(
        request,
        "analysis/run.html",
        {
            "run": run,
            "rows": table,
            "timeline": timeline,
            "telemetry": getattr(run, "telemetry", None),
            "dtype": (run.hardware or {}).get("dtype") if isinstance(run.hardware, dict) else None,
        },
    )


@require_safe
def result_compare(request, a: int, b: int):
    results = RequestResult.objects.select_related("run__arm", "run__experiment__trace", "trace_request")
    left = teams.visible_get(results, request.user, pk=a, what="result")
    right = teams.visible_get(results, request.user, pk=b, what="result")
    divergence = None
    for i, (x, y) in enumerate(zip(left.output_token_ids, right.output_token_ids, strict=False)):
        if x != y:
            divergence = i
            break
    else:
        if len(left.output_token_ids) != len(right.output_token_ids):
            divergence = min(len(left.output_token_ids), len(right.output_token_ids))
    if all(raw_text_allowed(user=request.user, team_id=r.run.experiment.trace.team_id) for r in (left, right)):
        raw_text_access_record(
            user=request.user, view="outputs side by side", object_ref=f"results {a} and {b}"
        )
    else:
        for r in (left, right):
            r.output_text = raw_text_shown(r.output_text, allowed=False)
        shown = left.trace_request
        shown.prompt, shown.messages = raw_text_shown(shown.prompt or shown.messages, allowed=False), None
    return render(
        request,
        "analysis/compare.html",
        {"outputs": [left, right], "divergence": divergence, "trace_request": left.trace_request},
    )


@require_safe
def experiment_results_csv(request, pk: int):
    experiment = teams.visible_get(Experiment.objects.select_related("trace"), request.user, pk=pk)
    runs = list(Run.objects.filter(experiment=experiment, status=Run.Status.DONE).select_related("arm"))
    requests, _ = results_frames(runs=runs)
    raw_text = raw_text_allowed(user=request.user, team_id=experiment.trace.team_id)
    requests = results_frame_shown(requests, raw_text=raw_text)
    if raw_text:
        raw_text_access_record(user=request.user, view="results CSV", object_ref=f"experiment {pk}")
    columns = [c for c in requests.columns if c not in ("response_format", "tools", "output_token_ids")]

    class Echo:
        def write(self, value):
            return value

    writer = csv.writer(Echo())

    def rows():
        yield writer.writerow([csv_cell(c) for c in columns])
        for record in requests[columns].itertuples(index=False):
            yield writer.writerow(
                [
                    csv_cell(
                        json.dumps(v.tolist() if isinstance(v, np.ndarray) else v)
                        if isinstance(v, list | np.ndarray)
                        else ("" if v is None or (isinstance(v, float) and pd.isna(v)) else v)
                    )
                    for v in record
                ]
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="experiment-{pk}-results.csv"'
    return response


@require_safe
def experiment_summary_json(request, pk: int):
    experiment = teams.visible_get(Experiment.objects.select_related("trace"), request.user, pk=pk)
    stored = comparison_for_experiment(experiment=experiment)
    if stored is None:
        return HttpResponse(
            json.dumps({"error": "the comparison has not been computed yet", "state": comparison_state(experiment=experiment)}),
            content_type="application/json",
            status=409,
        )
    try:
        summary_load(stored)  # the download is the stored JSON as it is, once it reads as the contract
    except ComparisonSchemaError as exc:
        return HttpResponse(json.dumps({"error": str(exc)}), content_type="application/json", status=409)
    raw_text = raw_text_allowed(user=request.user, team_id=experiment.trace.team_id)
    if raw_text and (stored.get("quality") or {}).get("first_divergences"):
        raw_text_access_record(user=request.user, view="comparison JSON", object_ref=f"experiment {pk}")
    shown = stored_shown(stored, raw_text=raw_text)
    response = HttpResponse(json.dumps(shown, indent=1), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="experiment-{pk}-comparison.json"'
    return response
