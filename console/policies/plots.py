"""Plotly figure for the policy page: benefit per rule, train against holdout."""

from __future__ import annotations

import plotly.graph_objects as go


def benefit_per_rule(rows: list[dict], *, scale: float = 1000.0, unit: str = "ms") -> go.Figure:
    """Bars of the mean saving per request (``scale`` x seconds) of each enabling rule on train
    and on holdout, with their intervals as error bars."""
    fig = go.Figure()
    on = [r for r in rows if r.get("arm")]
    labels = [f"{r['index']}. {r['when']} → {r['arm']}" for r in on]
    for split, colour in (("train", "#98a2b3"), ("holdout", "#1570ef")):
        values, plus, minus = [], [], []
        for r in on:
            s = r.get(split) or {}
            b, lo, hi = s.get("benefit"), s.get("lo"), s.get("hi")
            values.append(b * scale if b is not None else None)
            plus.append((hi - b) * scale if b is not None and hi is not None else None)
            minus.append((b - lo) * scale if b is not None and lo is not None else None)
        fig.add_trace(
            go.Bar(
                x=labels,
                y=values,
                name=split,
                marker_color=colour,
                error_y=dict(type="data", array=plus, arrayminus=minus, visible=True),
            )
        )
    fig.update_layout(
        title="Saving per request, by rule (train vs holdout)",
        barmode="group",
        yaxis_title=f"baseline − candidate ({unit})",
    )
    return fig
