"""Figures stay linear in the number of requests and embed as data, never as inline script."""

from __future__ import annotations

import json
import re

import pandas as pd

from console.analysis import plots


def _rows(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "scheduled_s": [i * 0.1 for i in range(n)],
            "sent_s": [i * 0.1 + 0.01 for i in range(n)],
            "first_token_s": [i * 0.1 + 0.05 for i in range(n)],
            "finish_s": [i * 0.1 + 0.5 if i % 4 else None for i in range(n)],  # every 4th unfinished
        }
    )


def test_it_draws_the_run_timeline_bars_as_one_trace_instead_of_a_shape_per_request():
    fig = plots.run_timeline(_rows(400))
    assert len(fig.layout.shapes) == 0  # a shape per request made the run page quadratic
    bars = fig.data[0]
    assert bars.mode == "lines" and len(bars.x) == 3 * 300  # start, finish, gap per finished request
    assert list(bars.x[:3]) == [0.1, 0.6, None] and list(bars.y[:3]) == [1, 1, None]


def test_it_embeds_a_figure_as_a_json_data_block_with_no_inline_script():
    html = plots.fig_html(plots.run_timeline(_rows(5)), div_id="fig-timeline")
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, flags=re.S)
    assert len(scripts) == 1
    attrs, body = scripts[0]
    assert 'type="application/json"' in attrs and 'data-target="fig-timeline"' in attrs
    assert json.loads(body)["layout"]["title"]["text"].startswith("Timeline")
    assert '<div id="fig-timeline"' in html


def test_the_embedded_figure_carries_the_named_template_and_the_layout_it_was_given():
    import plotly.graph_objects as go
    import plotly.io as pio

    from console.figures import figure_html

    html = figure_html(go.Figure(go.Bar(x=[1], y=[2])), div_id="f", layout={"height": 123})
    layout = json.loads(re.search(r"<script[^>]*>(.*?)</script>", html, flags=re.S).group(1))["layout"]
    assert layout["height"] == 123
    white = pio.templates["plotly_white"].layout
    assert layout["template"]["layout"]["plot_bgcolor"] == white.plot_bgcolor
    assert layout["template"]["layout"]["xaxis"]["gridcolor"] == white.xaxis.gridcolor
    # another named template replaces it; the figure object itself never holds one
    html = figure_html(go.Figure(), div_id="g", layout={"template": "simple_white"})
    layout = json.loads(re.search(r"<script[^>]*>(.*?)</script>", html, flags=re.S).group(1))["layout"]
    assert layout["template"]["layout"]["xaxis"]["showline"] is True  # simple_white's, not plotly_white's
    assert pio.templates["plotly_white"].layout.xaxis.showline is None
    assert go.Figure().layout.template.layout.plot_bgcolor is None


def test_a_single_load_draws_bars_per_arm_not_lone_dots():
    from console.analysis.plots import metric_vs_load

    def row(arm, load, v):
        return {"arm": arm, "load": load, "stats": {"v": v}}

    one = metric_vs_load([row("baseline", "1x", 0.02), row("ngram", "1x", 0.015)], value=lambda s: s["v"],
                         title="TPOT p50 vs load", scale=1000, unit="ms per token")
    assert [t.type for t in one.data] == ["bar"] and list(one.data[0].x) == ["baseline", "ngram"]
    assert list(one.data[0].y) == [20.0, 15.0] and one.layout.title.text == "TPOT p50 at load 1x"
    two = metric_vs_load([row("baseline", "1x", 0.02), row("baseline", "4x", 0.03)], value=lambda s: s["v"],
                         title="TPOT p50 vs load")
    assert [t.type for t in two.data] == ["scatter"] and two.layout.title.text == "TPOT p50 vs load"


def test_a_long_chart_title_wraps_at_spaces_and_gets_the_room_it_needs():
    import plotly.graph_objects as go

    from console.figures import TITLE_LINE_CHARS, figure_embed, title_wrapped

    title = "Peak memory per arm (where it came from: see the sources table) at every load level"
    wrapped = title_wrapped(title)
    assert wrapped.replace("<br>", " ") == title
    assert all(len(line) <= TITLE_LINE_CHARS for line in wrapped.split("<br>")) and wrapped.count("<br>") == 2
    fig = go.Figure(layout={"title": title, "height": 340, "margin": {"t": 40}})
    block = json.loads(re.search(r'<script type="application/json"[^>]*>(.*)</script>', figure_embed(fig)).group(1))
    assert block["layout"]["title"]["text"] == wrapped
    assert block["layout"]["margin"]["t"] == 80 and block["layout"]["height"] == 380
    short = go.Figure(layout={"title": "TTFT CDF", "margin": {"t": 40}})
    block = json.loads(re.search(r'<script type="application/json"[^>]*>(.*)</script>', figure_embed(short)).group(1))
    assert block["layout"]["title"]["text"] == "TTFT CDF" and block["layout"]["margin"]["t"] == 40
