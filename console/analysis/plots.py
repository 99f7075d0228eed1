"""Plotly figures for the comparison and run pages: pure functions from summaries/frames to
HTML fragments (plotly.js itself is served locally, never from a CDN)."""

from __future__ import annotations

from collections import defaultdict

import pandas as pd
import plotly.graph_objects as go

from console.figures import figure_html

LAYOUT = dict(
    template="plotly_white",
    height=340,
    margin=dict(l=55, r=20, t=40, b=45),
    legend=dict(orientation="h", y=-0.2),
)


def fig_html(fig: go.Figure, *, div_id: str) -> str:
    return figure_html(fig, div_id=div_id, layout=LAYOUT)


def latency_cdf(series: list[dict], *, metric: str, title: str) -> go.Figure:
    """CDF of one per-request latency per arm x load, from precomputed quantiles (seconds)."""
    fig = go.Figure()
    for item in series:
        fig.add_trace(
            go.Scatter(x=item["x"], y=item["y"], mode="lines", name=f"{item['arm']} @ {item['load']}")
        )
    fig.update_layout(title=title, xaxis_title=f"{metric} (seconds)", yaxis_title="share of requests")
    return fig


def metric_vs_load(
    headline: list[dict], *, metric: str, title: str, scale: float = 1.0, unit: str = ""
) -> go.Figure:
    """One line per arm across load levels (x: load label in experiment order)."""
    by_arm: dict[str, list[tuple[str, float | None]]] = defaultdict(list)
    for row in headline:
        value = row.get(metric)
        by_arm[row["arm"]].append((row["load"], None if value is None else value * scale))
    fig = go.Figure()
    for arm, points in by_arm.items():
        fig.add_trace(
            go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers", name=arm)
        )
    fig.update_layout(title=title, xaxis_title="load level", yaxis_title=unit)
    return fig


def acceptance_by_task(rows: list[dict]) -> go.Figure:
    fig = go.Figure()
    key = "task"
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in rows:
        label = f"{row.get('arm')} @ {row.get('load')}"
        series[label][0].append(row.get(key))
        series[label][1].append(row.get("acceptance_rate"))
    for label, (x, y) in series.items():
        fig.add_trace(go.Bar(x=x, y=y, name=label))
    fig.update_layout(
        title="Acceptance rate by task",
        barmode="group",
        yaxis_title="accepted / proposed",
        yaxis_range=[0, 1],
    )
    return fig


def acceptance_by_output_position(rows: list[dict]) -> go.Figure:
    fig = go.Figure()
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in rows:
        label = f"{row.get('arm')} @ {row.get('load')}"
        series[label][0].append(str(row.get("position_bucket")))
        series[label][1].append(row.get("acceptance_rate", row.get("rate")))
    for label, (x, y) in series.items():
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=label))
    fig.update_layout(
        title="Acceptance over output position",
        xaxis_title="token index within the answer",
        yaxis_title="accepted / proposed",
        yaxis_range=[0, 1],
    )
    return fig


def acceptance_by_draft_position(rows: list[dict]) -> go.Figure:
    fig = go.Figure()
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in rows:
        label = f"{row.get('arm')} @ {row.get('load')}"
        series[label][0].append(row.get("position", row.get("j")))
        series[label][1].append(row.get("rate"))
    for label, (x, y) in series.items():
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=label))
    fig.update_layout(
        title="P(draft position j accepted | proposed)",
        xaxis_title="draft position j",
        yaxis_title="probability",
        yaxis_range=[0, 1],
    )
    return fig


def sweep_knees(knees: list[dict]) -> go.Figure:
    fig = go.Figure()
    for knee in knees:
        if knee.get("dimension"):
            continue  # the all-requests view; slices are in the table
        points = knee.get("points") or []
        label = f"{knee.get('sweep')} @ {knee.get('load')}"
        xs = [p.get("k") for p in points]
        ys = [None if p.get("tpot_s_p50") is None else p["tpot_s_p50"] * 1000 for p in points]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=label))
        if knee.get("knee_k") is not None:
            k = knee["knee_k"]
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


def memory_per_arm(headline: list[dict]) -> go.Figure:
    fig = go.Figure()
    loads = sorted({row["load"] for row in headline}, key=str)
    for load in loads:
        rows = [r for r in headline if r["load"] == load]
        fig.add_trace(
            go.Bar(
                x=[r["arm"] for r in rows],
                y=[(r.get("peak_memory_bytes") or 0) / 2**30 for r in rows],
                name=load,
            )
        )
    # GPU memory on GPU hosts; elsewhere the worker process's resident memory, which holds the
    # engine, its models and the replay client together (see docs/gpu-workers.md).
    fig.update_layout(
        title="Peak memory per arm (GPU hosts: GPU memory; CPU: the worker process, models and client included)",
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


CAPACITY_METRICS = {
    "attainment": ("SLO attainment vs offered rate", "share of requests within deadline", 1.0),
    "p95_tpot_s": ("p95 TPOT vs offered rate", "ms per token", 1000.0),
    "p95_e2e_s": ("p95 end-to-end vs offered rate", "seconds", 1.0),
}


def capacity_curve(capacity: dict, *, metric: str) -> go.Figure:
    """One line per arm (each repeat's steps pooled, by offered rate multiplier, log x) of one
    capacity-search statistic, the SLO's bound drawn as a dashed line and each arm's capacity as a
    dotted vertical line. ``capacity`` is the comparison's ``capacity`` section."""
    title, unit, scale = CAPACITY_METRICS[metric]
    fig = go.Figure()
    for arm in capacity.get("arms") or []:
        points = sorted(
            (p for p in arm.get("steps") or [] if p.get(metric) is not None), key=lambda p: p["rate_multiplier"]
        )
        fig.add_trace(
            go.Scatter(
                x=[p["rate_multiplier"] for p in points],
                y=[p[metric] * scale for p in points],
                mode="lines+markers",
                name=str(arm.get("arm")),
                marker=dict(symbol=["circle" if p.get("passed") else "x" for p in points]),
                text=[f"repeat {p['repeat']} step {p['step']}: {'pass' if p.get('passed') else 'fail'}" for p in points],
            )
        )
        if arm.get("rate_multiplier") is not None:
            fig.add_vline(x=arm["rate_multiplier"], line_dash="dot", line_width=1, opacity=0.5)
    bound = (capacity.get("slo") or {}).get(metric)
    if bound is not None:
        fig.add_hline(y=bound * scale, line_dash="dash", line_color="firebrick", annotation_text="SLO")
    fig.update_layout(title=title, xaxis_title="offered rate (x the trace's arrival rate)", yaxis_title=unit)
    fig.update_xaxes(type="log")
    return fig
