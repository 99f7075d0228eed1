from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
from django.contrib import messages
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST, require_safe

from console.accounts.access import capability_required
from console.accounts.roles import RUN_EXPERIMENT
from console.analysis import comparison_page, plots
from console.analysis.comparison.schema import ComparisonSchemaError, Summary, summary_load
from console.analysis.models import RequestResult
from console.analysis.selectors import (
    comparison_for_experiment,
    comparison_progress,
    comparison_state,
    comparison_summary_for_experiment,
    experiment_cross_vocabulary_arms,
    results_frames,
)
from console.experiments.models import Experiment, Run
from console.exports import csv_cell


def _stored_summary(experiment: Experiment) -> tuple[Summary | None, str | None]:
    """The stored comparison, or None and why when it was stored in another version or shape."""
    try:
        return comparison_summary_for_experiment(experiment=experiment), None
    except ComparisonSchemaError as exc:
        return None, str(exc)


@require_safe
def experiment_comparison(request, pk: int):
    experiment = get_object_or_404(Experiment.objects.select_related("trace"), pk=pk)
    summary, summary_error = _stored_summary(experiment)
    state = comparison_state(experiment=experiment)
    context: dict = {"experiment": experiment, "summary": summary, "summary_error": summary_error, "state": state}
    if state in ("missing", "stale"):
        context["progress"] = comparison_progress(experiment=experiment)
    status = 200
    if summary is not None:
        context.update(comparison_page.comparison_context(summary, request.GET.get("slice")))
        context["cross_vocabulary_arms"] = experiment_cross_vocabulary_arms(experiment=experiment)
        status = 400 if context["slice_error"] else 200
    return render(request, "analysis/comparison.html", context, status=status)


@require_POST
@capability_required(RUN_EXPERIMENT)
def experiment_comparison_refresh(request, pk: int):
    """Ask a worker to (re)compute the comparison from the runs finished now."""
    from workers.tasks import compute_comparison

    experiment = get_object_or_404(Experiment, pk=pk)
    compute_comparison.delay(experiment_id=experiment.pk)
    messages.success(request, "A worker is computing the comparison from the runs finished now.")
    return redirect("analysis:comparison", pk=experiment.pk)


@require_safe
def run_detail(request, pk: int):
    run = get_object_or_404(Run.objects.select_related("experiment", "arm__config"), pk=pk)
    requests, _ = results_frames(runs=[run])
    timeline = plots.fig_html(plots.run_timeline(requests), div_id="timeline") if not requests.empty else ""
    rows = list(RequestResult.objects.filter(run=run).select_related("trace_request").order_by("scheduled_s"))
    table = []
    sent = run.prompt_tokens if isinstance(run.prompt_tokens, dict) else {}
    for r in rows:
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
    left = get_object_or_404(RequestResult.objects.select_related("run__arm", "trace_request"), pk=a)
    right = get_object_or_404(RequestResult.objects.select_related("run__arm", "trace_request"), pk=b)
    divergence = None
    for i, (x, y) in enumerate(zip(left.output_token_ids, right.output_token_ids, strict=False)):
        if x != y:
            divergence = i
            break
    else:
        if len(left.output_token_ids) != len(right.output_token_ids):
            divergence = min(len(left.output_token_ids), len(right.output_token_ids))
    return render(
        request,
        "analysis/compare.html",
        {"outputs": [left, right], "divergence": divergence, "trace_request": left.trace_request},
    )


@require_safe
def experiment_results_csv(request, pk: int):
    experiment = get_object_or_404(Experiment, pk=pk)
    runs = list(Run.objects.filter(experiment=experiment, status=Run.Status.DONE).select_related("arm"))
    requests, _ = results_frames(runs=runs)
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
    experiment = get_object_or_404(Experiment, pk=pk)
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
    response = HttpResponse(json.dumps(stored, indent=1), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="experiment-{pk}-comparison.json"'
    return response
