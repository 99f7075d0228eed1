"""Plotly figures as HTML that a ``script-src 'self'`` Content-Security-Policy allows.

``plotly.io.to_html`` writes an inline ``<script>`` calling ``Plotly.newPlot``, which such a policy
blocks. Here the figure travels as a JSON data block (not executed, so not subject to
``script-src``) that ``static/js/console.js`` draws with the locally served plotly.js.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from django.utils.html import escape

# Every go.Figure deep-copies the default template ("plotly", about 10,000 nested values) when it
# is made and again when a layout names one: that was most of a comparison page's render time.
# Figures are built with none and the named template joins their JSON once, from a cached copy.
pio.templates.default = "none"
DEFAULT_TEMPLATE = "plotly_white"


@functools.lru_cache(maxsize=8)
def _template(name: str) -> dict:
    return json.loads(pio.json.to_json_plotly(pio.templates[name].to_plotly_json()))


# Plotly does not wrap a title: one longer than a half-width card is cut off at 1024 px.
TITLE_LINE_CHARS = 38  # a card of the three-column grid is about 360 px wide at 1440
TITLE_LINE_PX = 20


def title_wrapped(text: str, *, width: int = TITLE_LINE_CHARS) -> str:
    """``text`` broken into lines of at most ``width`` characters at spaces, joined by ``<br>``
    (plotly's line break); a word longer than a line stays whole."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def _layout_wrapped(layout: dict[str, Any]) -> dict[str, Any]:
    """The layout with its title wrapped and the top margin grown by the lines it added."""
    title = layout.get("title")
    text = title.get("text") if isinstance(title, dict) else title if isinstance(title, str) else None
    if not text or "<br>" in text or len(text) <= TITLE_LINE_CHARS:
        return layout
    wrapped = title_wrapped(text)
    added = wrapped.count("<br>")
    margin = dict(layout.get("margin") or {})
    margin["t"] = int(margin.get("t", 40)) + TITLE_LINE_PX * added
    height = layout.get("height")
    extra = {"height": int(height) + TITLE_LINE_PX * added} if height else {}
    new_title = {**title, "text": wrapped} if isinstance(title, dict) else {"text": wrapped}
    return {**layout, "title": new_title, "margin": margin, **extra}


def figure_embed(
    fig: go.Figure, *, div_id: str | None = None, config: dict | None = None, template: str = DEFAULT_TEMPLATE
) -> str:
    div_id = div_id or f"fig-{uuid.uuid4().hex[:12]}"
    data = fig.to_plotly_json()
    layout = _layout_wrapped(dict(data.get("layout") or {}))
    layout.pop("template", None)
    data["layout"] = {**layout, "template": _template(template)}
    # {"data": [...], "layout": {...}}; '<' only occurs inside JSON strings, where \u003c means the
    # same, so no '</script>' can end the block early.
    text = pio.to_json(data, validate=False).replace("<", "\\u003c")
    options = escape(json.dumps({"responsive": True, **(config or {})}))
    target = escape(div_id)
    return (
        f'<div><div id="{target}" class="plotly-graph-div" style="height:100%; width:100%;"></div>'
        f'<script type="application/json" class="plotly-figure" data-target="{target}" data-config="{options}">'
        f"{text}</script></div>"
    )


def figure_html(fig: go.Figure, *, div_id: str | None = None, layout: Mapping[str, Any] | None = None) -> str:
    """``fig`` as the console embeds every figure: ``layout`` applied (its ``template`` by name,
    plotly_white unless given), no plotly logo, responsive."""
    rest = dict(layout or {})
    template = rest.pop("template", DEFAULT_TEMPLATE)
    if rest:
        fig.update_layout(**rest)
    return figure_embed(fig, div_id=div_id, config={"displaylogo": False}, template=template)
