from __future__ import annotations

import csv
import json
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from django.contrib import messages
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST, require_safe

from console.accounts.access import capability_required
from console.accounts.roles import RUN_EXPERIMENT
from console.analysis import plots, slice_view
from console.analysis.selectors import (
    comparison_for_experiment,
    comparison_progress,
    comparison_state,
    experiment_cross_vocabulary_arms,
)
from console.experiments.enqueue import comparison_enqueue
from console.experiments.models import Experiment, Run
from console.exports import csv_cell
from console.results.models import RequestResult
from console.results.selectors import results_frames

if TYPE_CHECKING:
    import plotly.graph_objects as go

HEADLINE_COLUMNS = [
    ("ttft_s_p95", "TTFT p95", "s"),
    ("tpot_s_p50", "TPOT p50", "ms"),
    ("tpot_s_p95", "TPOT p95", "ms"),
    ("e2e_s_p95", "e2e p95", "s"),
    ("e2e_s_p99", "e2e p99", "s"),
    ("goodput_rps", "goodput", "req/s"),
    ("acceptance_rate", "acceptance", "%"),
    ("mean_acceptance_length", "mean accept. length", ""),
    ("tokens_per_pass", "tokens/target pass", ""),
    ("cost_per_success_usd", "$/successful task", "$"),
    ("n_regressions", "quality regressions", ""),
]
# A headline column whose paired comparison is stored under another (metric, stat): a traffic
# class's goodput is compared through its per-request share (metrics.class_goodput).
COLUMN_DELTAS = {"goodput_rps": ("class_goodput_rps", "mean")}


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


def _delta_cell(delta: dict | None) -> dict:
    """The paired comparison under a value: ratio with interval, the A/A floor beside it, and the
    verdict (or why it was not measured)."""
    if not delta:
        return {}
    if not delta.get("measured"):
        return {"delta": delta.get("reason") or "not measured", "verdict": "not-measured", "floor": ""}
    out = {"verdict": (delta.get("verdict") or "not measured").replace(" ", "-")}
    if delta.get("ratio") is not None:
        lo, hi = delta.get("ratio_lo"), delta.get("ratio_hi")
        out["delta"] = f"×{delta['ratio']:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "")
    floor = delta.get("noise_floor")
    out["floor"] = "no noise floor" if floor is None else f"floor {floor_text(str(delta.get('metric') or ''), floor)}"
    return out


# Metrics that are shares of requests (means of yes/no): their floors read in percentage points.
SHARE_METRICS = frozenset(
    {"success", "met_deadline", "exact_match", "json_valid", "schema_valid", "tool_call_valid", "acceptance_rate"}
)


def floor_text(metric: str, floor: float) -> str:
    """A noise floor with the unit its metric's name says: seconds (``_s``, shown in ms below
    1 s), requests per second (``_rps``), dollars (``_usd``), percentage points (a share of
    requests, ``SHARE_METRICS``), else a bare number."""
    if metric.endswith("_s"):
        return f"±{floor * 1000:.1f} ms" if floor < 1 else f"±{floor:.2f} s"
    if metric.endswith("_rps"):
        return f"±{floor:.3g} req/s"
    if metric.endswith("_usd"):
        return f"±${floor:.3g}"
    if metric in SHARE_METRICS:
        return f"±{floor * 100:.1f} pp"
    return f"±{floor:.3g}"


def _headline_table(rows: list[dict]) -> list[dict]:
    """Rows of cells: value, and for candidates the paired delta with its interval, the noise
    floor and the verdict. Every headline cell is exploratory: the gate reads the primary
    endpoints only. ``rows`` are the headline's or one slice's (``slice_view.slice_rows``)."""
    table = []
    for row in rows:
        deltas = {(d.get("metric"), d.get("stat")): d for d in row.get("deltas") or []}
        cells = []
        for key, _label, unit in HEADLINE_COLUMNS:
            metric, _, stat = key.rpartition("_")
            metric, stat = COLUMN_DELTAS.get(key, (metric, stat))
            cell = {"text": _fmt(row.get(key), unit), "verdict": None, "delta": None, "floor": None}
            cell.update(_delta_cell(deltas.get((metric, stat))))
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


def _primary_rows(summary: dict) -> list[dict]:
    rows = []
    for r in summary.get("primary") or []:
        unit = "ms" if str(r.get("metric", "")).endswith("_s") else ""
        rows.append(
            r
            | _delta_cell(r)
            | {
                "base_text": _fmt(r.get("base"), unit),
                "cand_text": _fmt(r.get("cand"), unit),
                "delta_text": _fmt(r.get("delta"), unit),
                "interval_text": (
                    f"[{_fmt(r.get('delta_lo'), unit)}, {_fmt(r.get('delta_hi'), unit)}]" if r.get("measured") else ""
                ),
            }
        )
    return rows


def _slice_figures(summary: dict, chosen, rows: list[dict]) -> list[tuple[str, go.Figure]]:
    """The charts the slice selector redraws: latency CDFs and the load curves of ``rows``."""
    return [
        (
            "cdf-e2e",
            plots.latency_cdf(
                slice_view.slice_cdf_series(summary, chosen, metric="e2e_s"), metric="e2e_s", title="End-to-end latency CDF"
            ),
        ),
        (
            "cdf-ttft",
            plots.latency_cdf(slice_view.slice_cdf_series(summary, chosen, metric="ttft_s"), metric="ttft_s", title="TTFT CDF"),
        ),
        (
            "tpot-load",
            plots.metric_vs_load(rows, metric="tpot_s_p50", title="TPOT p50 vs load", scale=1000, unit="ms per token"),
        ),
        (
            "goodput-load",
            plots.metric_vs_load(rows, metric="goodput_rps", title="Goodput vs load", unit="requests/s within deadline"),
        ),
    ]


def _slice_context(summary: dict, raw: str | None) -> dict:
    """The slice selector's state and the table and charts of the chosen slice (all requests when
    ``raw`` names none: ``slice_error`` then says why)."""
    error = None
    try:
        chosen = slice_view.slice_parse(summary, raw)
    except slice_view.SliceError as exc:
        chosen, error = None, str(exc)
    rows = slice_view.slice_rows(summary, chosen)
    titled = _slice_figures(summary, chosen, rows)
    label = None
    if chosen is not None:
        label = f"{slice_view.DIMENSION_LABELS.get(chosen[0], chosen[0])} = {chosen[1]}"
        for _div_id, fig in titled:
            fig.update_layout(title=f"{fig.layout.title.text} ({label})")
    return {
        "slice_groups": slice_view.slice_options(summary),
        "slice_selected": slice_view.ALL if chosen is None else slice_view.slice_key(*chosen),
        "slice_label": label,
        "slice_error": error,
        "headline_table": _headline_table(rows),
        "slice_figures": [(div_id, plots.fig_html(fig, div_id=f"fig-{div_id}")) for div_id, fig in titled],
    }


def _sessions_context(summary: dict) -> dict | None:
    """The multi-turn tables (``summary["sessions"]``, console.analysis.metrics.sessions_aggregate
    and turns_aggregate), or None when no arm replayed a session of more than one turn."""
    sessions = summary.get("sessions") or {}
    by_arm_load = sessions.get("by_arm_load") or []
    if not any((row.get("n_multi_turn") or 0) > 0 for row in by_arm_load):
        return None
    return {"by_arm_load": by_arm_load, "by_turn": sessions.get("by_turn") or []}


@require_safe
def experiment_comparison(request, pk: int):
    experiment = get_object_or_404(Experiment.objects.select_related("trace"), pk=pk)
    summary = comparison_for_experiment(experiment=experiment)
    state = comparison_state(experiment=experiment)
    context: dict = {"experiment": experiment, "summary": summary, "state": state}
    if state in ("missing", "stale"):
        context["progress"] = comparison_progress(experiment=experiment)
    status = 200
    if summary:
        headline = summary.get("headline", [])
        acceptance = summary.get("acceptance", {})
        figures = [
            ("acc-task", plots.acceptance_by_task(acceptance.get("by_task", []))),
            ("acc-outpos", plots.acceptance_by_output_position(acceptance.get("by_output_position", []))),
            ("acc-draftpos", plots.acceptance_by_draft_position(acceptance.get("by_position", []))),
            ("sweep", plots.sweep_knees(summary.get("knees", []))),
            ("memory", plots.memory_per_arm(headline)),
        ]
        capacity = summary.get("capacity") or {}
        capacity_figures = [
            (f"cap-{metric}", plots.capacity_curve(capacity, metric=metric))
            for metric in plots.CAPACITY_METRICS
            if capacity and (metric != "p95_e2e_s" or (capacity.get("slo") or {}).get(metric) is not None)
        ]
        context.update(_slice_context(summary, request.GET.get("slice")))
        status = 400 if context["slice_error"] else 200
        quality = summary.get("quality") or {}
        context.update(
            headline_columns=HEADLINE_COLUMNS,
            figures=[(div_id, plots.fig_html(fig, div_id=f"fig-{div_id}")) for div_id, fig in figures],
            regressions=quality.get("regressions", [])[:200],
            quality=quality,
            first_divergences=quality.get("first_divergences") or [],
            class_goodput=slice_view.class_goodput_rows(summary),
            telemetry=slice_view.telemetry_rows(summary),
            cross_vocabulary_arms=experiment_cross_vocabulary_arms(experiment=experiment),
            noise_floor=[
                n
                | {
                    "floor_text": None if n.get("noise_floor") is None else floor_text(str(n.get("metric")), n["noise_floor"]),
                    "rel_text": None if n.get("noise_floor_rel") is None else f"±{n['noise_floor_rel']:.1%}",
                }
                for n in summary.get("noise_floor", [])
                if n.get("dimension") is None
            ],
            stability=summary.get("baseline_stability") or {},
            endpoints=summary.get("endpoints") or {},
            primary=_primary_rows(summary),
            quality_counts=quality.get("counts", []),
            correctness=summary.get("correctness"),
            capacity=capacity or None,
            capacity_figures=[(d, plots.fig_html(fig, div_id=f"fig-{d}")) for d, fig in capacity_figures],
            sessions=_sessions_context(summary),
            knees=[k for k in summary.get("knees", []) if k.get("knee_k") is not None],
            notes=summary.get("notes", []),
        )
    return render(request, "analysis/comparison.html", context, status=status)


@require_POST
@capability_required(RUN_EXPERIMENT)
def experiment_comparison_refresh(request, pk: int):
    """Ask a worker to (re)compute the comparison from the runs finished now."""
    experiment = get_object_or_404(Experiment, pk=pk)
    comparison_enqueue(experiment_id=experiment.pk)
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
    summary = comparison_for_experiment(experiment=experiment)
    if summary is None:
        return HttpResponse(
            json.dumps({"error": "the comparison has not been computed yet", "state": comparison_state(experiment=experiment)}),
            content_type="application/json",
            status=409,
        )
    response = HttpResponse(json.dumps(summary, indent=1), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="experiment-{pk}-comparison.json"'
    return response
