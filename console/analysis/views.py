from __future__ import annotations

import csv
import json

import pandas as pd
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_safe

from console.analysis import plots
from console.analysis.models import RequestResult
from console.analysis.selectors import comparison_for_experiment, results_frames
from console.experiments.models import Experiment, Run

HEADLINE_COLUMNS = [
    ("ttft_s_p95", "TTFT p95", "s"),
    ("tpot_s_p50", "TPOT p50", "ms"),
    ("tpot_s_p95", "TPOT p95", "ms"),
    ("e2e_s_p95", "e2e p95", "s"),
    ("e2e_s_p99", "e2e p99", "s"),
    ("goodput_rps", "goodput", "req/s"),
    ("acceptance_rate", "acceptance", "%"),
    ("accepted_per_pass", "tokens/pass", ""),
    ("cost_per_success_usd", "$/successful task", "$"),
    ("n_regressions", "quality regressions", ""),
]


def _fmt(value, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "ms":
        return f"{value * 1000:.1f} ms"
    if unit == "%":
        return f"{value:.0%}"
    if unit == "$":
        return f"${value:.5f}" if value < 0.01 else f"${value:.3f}"
    if unit == "s":
        return f"{value:.3f} s"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _headline_table(summary: dict) -> list[dict]:
    """Rows of cells: value, and for candidates the delta with its interval and verdict."""
    table = []
    for row in summary.get("headline", []):
        deltas = {(d.get("metric"), d.get("stat")): d for d in row.get("deltas") or []}
        cells = []
        for key, _label, unit in HEADLINE_COLUMNS:
            metric, _, stat = key.rpartition("_")
            delta = deltas.get((metric, stat))
            cell = {"text": _fmt(row.get(key), unit), "verdict": None, "delta": None}
            if delta and delta.get("ratio") is not None:
                lo, hi = delta.get("ratio_lo"), delta.get("ratio_hi")
                cell["delta"] = f"×{delta['ratio']:.2f}" + (
                    f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
                )
                cell["verdict"] = (delta.get("verdict") or "unknown").replace(" ", "-")
            cells.append(cell)
        table.append(
            {
                "arm": row["arm"],
                "load": row["load"],
                "is_baseline": row.get("is_baseline"),
                "cells": cells,
                "n": row.get("n_requests"),
                "failed": row.get("n_failed"),
            }
        )
    return table


@require_safe
def experiment_comparison(request, pk: int):
    experiment = get_object_or_404(Experiment.objects.select_related("trace"), pk=pk)
    summary = comparison_for_experiment(experiment=experiment)
    context: dict = {"experiment": experiment, "summary": summary}
    if summary:
        headline = summary.get("headline", [])
        acceptance = summary.get("acceptance", {})
        cdf = summary.get("cdf", {})
        figures = [
            (
                "cdf-e2e",
                plots.latency_cdf(cdf.get("e2e_s", []), metric="e2e_s", title="End-to-end latency CDF"),
            ),
            ("cdf-ttft", plots.latency_cdf(cdf.get("ttft_s", []), metric="ttft_s", title="TTFT CDF")),
            (
                "tpot-load",
                plots.metric_vs_load(
                    headline, metric="tpot_s_p50", title="TPOT p50 vs load", scale=1000, unit="ms per token"
                ),
            ),
            (
                "goodput-load",
                plots.metric_vs_load(
                    headline, metric="goodput_rps", title="Goodput vs load", unit="requests/s within deadline"
                ),
            ),
            ("acc-task", plots.acceptance_by_task(acceptance.get("by_task", []))),
            ("acc-outpos", plots.acceptance_by_output_position(acceptance.get("by_output_position", []))),
            ("acc-draftpos", plots.acceptance_by_draft_position(acceptance.get("by_position", []))),
            ("sweep", plots.sweep_knees(summary.get("knees", []))),
            ("memory", plots.memory_per_arm(headline)),
        ]
        context.update(
            headline_columns=HEADLINE_COLUMNS,
            headline_table=_headline_table(summary),
            figures=[(div_id, plots.fig_html(fig, div_id=f"fig-{div_id}")) for div_id, fig in figures],
            regressions=(summary.get("quality") or {}).get("regressions", [])[:200],
            quality=summary.get("quality") or {},
            noise_floor=summary.get("noise_floor", []),
            knees=[k for k in summary.get("knees", []) if k.get("knee_k") is not None],
            notes=summary.get("notes", []),
        )
    return render(request, "analysis/comparison.html", context)


@require_safe
def run_detail(request, pk: int):
    run = get_object_or_404(Run.objects.select_related("experiment", "arm__config"), pk=pk)
    requests, _ = results_frames(runs=[run])
    timeline = plots.fig_html(plots.run_timeline(requests), div_id="timeline") if not requests.empty else ""
    rows = list(RequestResult.objects.filter(run=run).select_related("trace_request").order_by("scheduled_s"))
    table = []
    for r in rows:
        drafted = sum(r.drafted or [])
        table.append(
            {
                "r": r,
                "ttft": None if r.first_token_s is None else r.first_token_s - r.scheduled_s,
                "e2e": None if r.finish_s is None else r.finish_s - r.scheduled_s,
                "acceptance": sum(r.accepted) / drafted if drafted else None,
            }
        )
    return render(
        request,
        "analysis/run.html",
        {"run": run, "rows": table, "timeline": timeline, "telemetry": getattr(run, "telemetry", None)},
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
        yield writer.writerow(columns)
        for record in requests[columns].itertuples(index=False):
            yield writer.writerow(
                [
                    json.dumps(v)
                    if isinstance(v, list)
                    else ("" if v is None or (isinstance(v, float) and pd.isna(v)) else v)
                    for v in record
                ]
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="experiment-{pk}-results.csv"'
    return response


@require_safe
def experiment_summary_json(request, pk: int):
    experiment = get_object_or_404(Experiment, pk=pk)
    summary = comparison_for_experiment(experiment=experiment)
    response = HttpResponse(json.dumps(summary, indent=1), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="experiment-{pk}-comparison.json"'
    return response
