"""Plotly figures as HTML that a ``script-src 'self'`` Content-Security-Policy allows.

``plotly.io.to_html`` writes an inline ``<script>`` calling ``Plotly.newPlot``, which such a policy
blocks. Here the figure travels as a JSON data block (not executed, so not subject to
``script-src``) that ``static/js/console.js`` draws with the locally served plotly.js.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from django.utils.html import escape


def figure_embed(fig: go.Figure, *, div_id: str | None = None, config: dict | None = None) -> str:
    div_id = div_id or f"fig-{uuid.uuid4().hex[:12]}"
    # {"data": [...], "layout": {...}}; '<' only occurs inside JSON strings, where \u003c means the
    # same, so no '</script>' can end the block early.
    text = pio.to_json(fig, validate=False).replace("<", "\\u003c")
    options = escape(json.dumps({"responsive": True, **(config or {})}))
    target = escape(div_id)
    return (
        f'<div><div id="{target}" class="plotly-graph-div" style="height:100%; width:100%;"></div>'
        f'<script type="application/json" class="plotly-figure" data-target="{target}" data-config="{options}">'
        f"{text}</script></div>"
    )


def figure_html(fig: go.Figure, *, div_id: str | None = None, layout: Mapping[str, Any] | None = None) -> str:
    """``fig`` as the console embeds every figure: ``layout`` applied, no plotly logo, responsive."""
    if layout:
        fig.update_layout(**layout)
    return figure_embed(fig, div_id=div_id, config={"displaylogo": False})
