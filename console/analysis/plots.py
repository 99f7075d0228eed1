"""Plotly figures for the comparison and run pages: pure functions from the typed comparison's
rows (``console.analysis.comparison.schema``) and the slice view's rows, or a run's frame, to
figures and HTML fragments (plotly.js itself is served locally, never from a CDN)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from console.analysis.comparison.schema import (
    AcceptanceByOutputPosition,
    AcceptanceByPosition,
    AcceptanceByTask,
    AcceptanceByTaskOutputPosition,
    AcceptanceByTaskPosition,
    Capacity,
    CapacitySlo,
    CapacityStep,
    Comparison,
    HeadlineRow,
    KneeRow,
    SliceRow,
)
from console.analysis.slice_view import CdfLine, TableRow
from console.figures import figure_html

LAYOUT = dict(
    template="plotly_white",
    height=340,
    margin=dict(l=55, r=20, t=40, b=45),
    legend=dict(orientation="h", y=-0.2),
)


def fig_html(fig: go.Figure, *, div_id: str) -> str:
    return figure_html(fig, div_id=div_id, layout=LAYOUT)


def latency_cdf(series: Sequence[CdfLine], *, metric: str, title: str) -> go.Figure:
    """CDF of one per-request latency per arm x load, from precomputed quantiles (seconds)."""
    fig = go.Figure()
    for item in series:
        fig.add_trace(
            go.Scatter(x=item["x"], y=item["y"], mode="lines", name=f"{item['arm']} @ {item['load']}")
        )
    fig.update_layout(title=title, xaxis_title=f"{metric} (seconds)", yaxis_title="share of requests")
    return fig


def metric_vs_load(
    rows: Sequence[TableRow],
    *,
    value: Callable[[HeadlineRow | SliceRow], float | None],
    title: str,
    scale: float = 1.0,
    unit: str = "",
) -> go.Figure:
    """One line per arm across load levels (x: load label in experiment order) of ``value`` of
    each row's statistics. With one load level a line is a lone dot: one bar per arm then, titled
    for that load (``title``'s " vs load" becomes " at load L")."""
    by_arm: dict[str, list[tuple[str, float | None]]] = defaultdict(list)
    for row in rows:
        v = value(row["stats"])
        by_arm[row["arm"]].append((row["load"], None if v is None else v * scale))
    loads = {load for points in by_arm.values() for load, _ in points}
    fig = go.Figure()
    if len(loads) == 1:
        (load,) = loads
        arms = list(by_arm)
        fig.add_trace(
            go.Bar(x=arms, y=[by_arm[a][0][1] for a in arms], marker_color="#1570ef", showlegend=False)
        )
        fig.update_layout(
            title=title.replace(" vs load", f" at load {load}"), xaxis_title="arm", yaxis_title=unit
        )
        return fig
    for arm, points in by_arm.items():
        fig.add_trace(
            go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers", name=arm)
        )
    fig.update_layout(title=title, xaxis_title="load level", yaxis_title=unit)
    return fig


def acceptance_by_task(rows: Sequence[AcceptanceByTask]) -> go.Figure:
    fig = go.Figure()
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in rows:
        label = f"{row.arm} @ {row.load}"
        series[label][0].append(row.task)
        series[label][1].append(row.acceptance_rate)
    for label, (x, y) in series.items():
        fig.add_trace(go.Bar(x=x, y=y, name=label))
    fig.update_layout(
        title="Acceptance rate by task",
        barmode="group",
        yaxis_title="accepted / proposed",
        yaxis_range=[0, 1],
    )
    return fig


def acceptance_by_output_position(rows: Sequence[AcceptanceByOutputPosition]) -> go.Figure:
    fig = go.Figure()
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in rows:
        label = f"{row.arm} @ {row.load}"
        series[label][0].append(row.position_bucket)
        series[label][1].append(row.acceptance_rate)
    for label, (x, y) in series.items():
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=label))
    fig.update_layout(
        title="Acceptance over output position",
        xaxis_title="token index within the answer",
        yaxis_title="accepted / proposed",
        yaxis_range=[0, 1],
    )
    return fig


def acceptance_by_draft_position(rows: Sequence[AcceptanceByPosition]) -> go.Figure:
    fig = go.Figure()
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in rows:
        label = f"{row.arm} @ {row.load}"
        series[label][0].append(row.position)
        series[label][1].append(row.rate)
    for label, (x, y) in series.items():
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=label))
    fig.update_layout(
        title="P(draft position j accepted | proposed)",
        xaxis_title="draft position j",
        yaxis_title="probability",
        yaxis_range=[0, 1],
    )
    return fig


# One cell of an acceptance heatmap: task, column label, rate (0..1), (tokens offered, accepted).
HeatCell = tuple[str, str, float | None, tuple[int, int]]
HEAT_DRAFT = (
    "task %{y}<br>draft position %{x} (the x-th token of a draft)<br>accepted when proposed: %{z:.0%}"
    "<br>%{customdata[1]:,} of %{customdata[0]:,} proposals accepted"
)
HEAT_OUTPUT = (
    "task %{y}<br>output tokens %{x} (where in the answer the step began)<br>acceptance: %{z:.0%}"
    " of drafted tokens<br>%{customdata[1]:,} of %{customdata[0]:,} drafted tokens accepted"
)

# Each heatmap: its div id, title, column axis and hover text.
HEATMAPS = (
    ("acc-task-draftpos", "Acceptance by task and draft position", "draft position j", HEAT_DRAFT),
    ("acc-task-outpos", "Acceptance by task and output position", "output tokens (range)", HEAT_OUTPUT),
)


def acceptance_heatmap(
    groups: dict[str, list[HeatCell]], *, title: str, x_title: str, hover: str
) -> go.Figure:
    """Task (rows) x position (columns) acceptance, one heatmap per arm x load (``groups``, in
    order, each a list of cells with its columns in order): the first shown, a menu picks another.
    Colour 0..100 %; a cell with nothing proposed is empty."""
    fig = go.Figure()
    labels = list(groups)
    for i, (label, cells) in enumerate(groups.items()):
        tasks = sorted({c[0] for c in cells})
        columns = list(dict.fromkeys(c[1] for c in cells))
        at = {(c[0], c[1]): c for c in cells}
        z = [[at[(t, x)][2] if (t, x) in at else None for x in columns] for t in tasks]
        counts = [[list(at[(t, x)][3]) if (t, x) in at else [0, 0] for x in columns] for t in tasks]
        heat = go.Heatmap(x=columns, y=tasks, z=z, customdata=counts, zmin=0, zmax=1, colorscale="Blues")
        heat.update(
            name=label, visible=i == 0, hoverongaps=False, hovertemplate=f"{hover}<extra>{label}</extra>"
        )
        fig.add_trace(heat.update(colorbar=dict(title="accepted", tickformat=".0%")))
    if len(labels) > 1:
        buttons = [
            dict(label=g, method="restyle", args=[{"visible": [j == i for j in range(len(labels))]}])
            for i, g in enumerate(labels)
        ]
        fig.update_layout(updatemenus=[dict(buttons=buttons, x=1, xanchor="right", y=1.02, yanchor="bottom")])
    one = f" ({labels[0]})" if len(labels) == 1 else ""
    fig.update_layout(title=title + one, xaxis_title=x_title, yaxis_title="task", xaxis_type="category")
    fig.update_yaxes(autorange="reversed")  # tasks top to bottom in alphabetical order
    return fig


def acceptance_heatmaps(comparison: Comparison) -> dict[str, list]:
    """The comparison's task x draft position and task x output position heatmaps (``figures``:
    ``(div id, html)``, none when no candidate recorded a drafting step) and, as "arm at load" in
    the headline's order, the speculative candidates with no per-step draft records
    (``not_measured``: e.g. an OpenAI-compatible server that reports run-level counters at most,
    or none). An arm configured not to speculate (an A/A arm) is neither."""
    acceptance = comparison.acceptance
    draft: dict[str, list[HeatCell]] = {}
    output: dict[str, list[HeatCell]] = {}
    rows: Sequence[AcceptanceByTaskPosition] = sorted(acceptance.by_task_position, key=lambda r: r.position)
    for r in rows:
        if r.proposed > 0:
            draft.setdefault(f"{r.arm} at {r.load}", []).append(
                (r.task, str(r.position), r.rate, (r.proposed, r.accepted))
            )
    spans: Sequence[AcceptanceByTaskOutputPosition] = sorted(
        acceptance.by_task_output_position, key=lambda r: r.position_start
    )
    for o in spans:
        if o.drafted > 0:
            cell = (o.task, o.position_bucket, o.acceptance_rate, (o.drafted, o.accepted))
            output.setdefault(f"{o.arm} at {o.load}", []).append(cell)
    plain = {(r.arm, r.load) for r in comparison.speculation if r.speculative is False}
    named = [
        f"{h.arm} at {h.load}"
        for h in comparison.headline
        if not h.is_baseline and (h.arm, h.load) not in plain
    ]
    figures = []
    for (div_id, title, x_title, hover), groups in zip(HEATMAPS, (draft, output), strict=True):
        ordered = {g: groups[g] for g in named if g in groups}
        if ordered:
            fig = acceptance_heatmap(ordered, title=title, x_title=x_title, hover=hover)
            figures.append((div_id, fig_html(fig, div_id=f"fig-{div_id}")))
    return {"figures": figures, "not_measured": [g for g in named if g not in draft and g not in output]}


def sweep_knees(knees: Sequence[KneeRow]) -> go.Figure:
    fig = go.Figure()
    for knee in knees:
        if knee.dimension:
            continue  # the all-requests view; slices are in the table
        label = f"{knee.sweep} @ {knee.load}"
        xs = [p.k for p in knee.points]
        ys = [None if p.tpot_s_p50 is None else p.tpot_s_p50 * 1000 for p in knee.points]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=label))
        if knee.knee_k is not None:
            k = knee.knee_k
            y = next((y for x, y in zip(xs, ys, strict=False) if x == k), None)
            fig.add_trace(
                go.Scatter(
                    x=[k],
                    y=[y],
                    mode="markers+text",
                    text=[f"knee k={k}"],
                    textposition="top center",
                    marker=dict(size=14, symbol="star"),
                    name=f"knee {label}",
                )
            )
    fig.update_layout(
        title="Draft-length sweep: TPOT p50 (k = 0 is the baseline)",
        xaxis_title="draft length k",
        yaxis_title="ms per output token",
    )
    return fig


def memory_per_arm(headline: Sequence[HeadlineRow]) -> go.Figure:
    fig = go.Figure()
    loads = sorted({row.load for row in headline}, key=str)
    for load in loads:
        rows = [r for r in headline if r.load == load]
        fig.add_trace(
            go.Bar(
                x=[r.arm for r in rows],
                y=[(r.peak_memory_bytes or 0) / 2**30 for r in rows],
                name=load,
            )
        )
    # In-process engines: GPU memory on GPU hosts, else the worker process's resident memory
    # (engine, models and replay client); openai arms: the server's registered telemetry, or
    # nothing (0 here, "not measured" in the sources table beside it).
    fig.update_layout(
        title="Peak memory per arm (where it came from: see the sources table)",
        yaxis_title="GiB",
        barmode="group",
    )
    return fig


def run_timeline(rows: pd.DataFrame) -> go.Figure:
    """Each request as a bar from its scheduled time to its finish; markers at send and first token."""
    fig = go.Figure()
    rows = rows.sort_values("scheduled_s")
    ys = list(range(len(rows)))
    # One line trace with gaps for every request's bar: a layout shape per request revalidates
    # every shape on each add (quadratic: 27 s for 200 requests, measured by bench/console_load.py).
    bar_x: list = []
    bar_y: list = []
    for y, start, finish in zip(ys, rows["scheduled_s"], rows["finish_s"], strict=True):
        if pd.notna(finish):
            bar_x += [start, finish, None]
            bar_y += [y, y, None]
    fig.add_trace(
        go.Scatter(
            x=bar_x,
            y=bar_y,
            mode="lines",
            line=dict(width=1, color="rgba(47,91,234,.35)"),
            hoverinfo="skip",
            showlegend=False,
        )
    )
    fig.add_trace(
        go.Scatter(
            x=rows["scheduled_s"],
            y=ys,
            mode="markers",
            name="scheduled",
            marker=dict(symbol="line-ns-open", size=10),
        )
    )
    fig.add_trace(go.Scatter(x=rows["sent_s"], y=ys, mode="markers", name="sent", marker=dict(size=5)))
    fig.add_trace(
        go.Scatter(x=rows["first_token_s"], y=ys, mode="markers", name="first token", marker=dict(size=6))
    )
    fig.add_trace(go.Scatter(x=rows["finish_s"], y=ys, mode="markers", name="finished", marker=dict(size=6)))
    fig.update_layout(
        title="Timeline: scheduled → sent → first token → finished",
        xaxis_title="seconds from run start",
        yaxis_title="request (by arrival)",
        height=max(300, 14 * len(rows) + 120),
    )
    return fig


@dataclass(frozen=True)
class CapacityMetric:
    """One capacity-search statistic a chart draws: its title and unit, the factor to the
    unit, the value of a step and the SLO's bound (None: not declared)."""

    title: str
    unit: str
    scale: float
    of_step: Callable[[CapacityStep], float | None]
    bound: Callable[[CapacitySlo], float | None]


CAPACITY_METRICS = {
    "attainment": CapacityMetric(
        "SLO attainment vs offered rate",
        "share of requests within deadline",
        1.0,
        lambda p: p.attainment,
        lambda s: s.attainment,
    ),
    "p95_tpot_s": CapacityMetric(
        "p95 TPOT vs offered rate", "ms per token", 1000.0, lambda p: p.p95_tpot_s, lambda s: s.p95_tpot_s
    ),
    "p95_e2e_s": CapacityMetric(
        "p95 end-to-end vs offered rate", "seconds", 1.0, lambda p: p.p95_e2e_s, lambda s: s.p95_e2e_s
    ),
}


def capacity_curve(capacity: Capacity, *, metric: str) -> go.Figure:
    """One line per arm (each repeat's steps pooled, by offered rate multiplier, log x) of one
    capacity-search statistic, the SLO's bound drawn as a dashed line and each arm's capacity as a
    dotted vertical line. ``capacity`` is the comparison's ``capacity`` section."""
    spec = CAPACITY_METRICS[metric]
    scale = spec.scale
    fig = go.Figure()
    for arm in capacity.arms:
        points = sorted(
            ((p, v) for p in arm.steps if (v := spec.of_step(p)) is not None),
            key=lambda pv: pv[0].rate_multiplier,
        )
        fig.add_trace(
            go.Scatter(
                x=[p.rate_multiplier for p, _ in points],
                y=[v * scale for _, v in points],
                mode="lines+markers",
                name=str(arm.arm),
                marker=dict(symbol=["circle" if p.passed else "x" for p, _ in points]),
                text=[
                    f"repeat {p.repeat} step {p.step}: {'pass' if p.passed else 'fail'}" for p, _ in points
                ],
            )
        )
        if arm.rate_multiplier is not None:
            fig.add_vline(x=arm.rate_multiplier, line_dash="dot", line_width=1, opacity=0.5)
    bound = spec.bound(capacity.slo)
    if bound is not None:
        fig.add_hline(y=bound * scale, line_dash="dash", line_color="firebrick", annotation_text="SLO")
    fig.update_layout(
        title=spec.title, xaxis_title="offered rate (x the trace's arrival rate)", yaxis_title=spec.unit
    )
    fig.update_xaxes(type="log")
    return fig
