"""The comparison page's slice selector in real Chromium under the production CSP: choosing a
slice redraws the headline table and the charts for it, in place, with no policy violation."""

from __future__ import annotations

import pytest

from tests.browser.test_console_browser import _login, page  # noqa: F401  (fixture)
from tests.browser.test_csp_browser import WATCH

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TABLE_COUNTS = """Array.from(document.querySelectorAll('#headline tbody tr td:last-child')).map(td => td.textContent.trim())"""
CHART = """(id) => { const el = document.getElementById(id); return el && el.layout ?
  {title: el.layout.title.text, x: el.data.map(t => Array.from(t.x || []))} : null; }"""


def test_it_redraws_the_table_and_charts_when_the_slice_changes(page, live_server, viewer, settings, tmp_path):  # noqa: F811
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    settings.SPECREVIEW_CSP = True
    experiment = experiment_synthesize(n_requests=50, ks=(2,), loads="1x", repeats=2, seed=7)
    comparison_refresh(experiment_id=experiment.pk, n_boot=200)  # what the worker's task does
    page.add_init_script(WATCH)
    _login(page, live_server, viewer)
    page.goto(f"{live_server.url}/analysis/experiments/{experiment.pk}/")
    page.wait_for_function("document.querySelectorAll('#slice-view .js-plotly-plot .main-svg').length >= 4")
    assert page.evaluate(TABLE_COUNTS) == ["100 (0)", "100 (0)"]
    whole_cdf = page.evaluate(CHART, "fig-cdf-e2e")
    assert page.evaluate(CHART, "fig-tpot-load")["title"] == "TPOT p50 at load 1x"

    page.select_option("#slice-select", "task:code")
    page.wait_for_selector('#slice-view[data-slice="task:code"]')
    page.wait_for_function("document.querySelectorAll('#slice-view .js-plotly-plot .main-svg').length >= 4")
    assert page.evaluate(TABLE_COUNTS) == ["20 (0)", "20 (0)"]  # every 5th request is code, 2 repeats
    assert "Headline for task = code" in page.inner_text("#headline h2")
    assert page.evaluate(CHART, "fig-tpot-load")["title"] == "TPOT p50 at load 1x (task = code)"
    code_cdf = page.evaluate(CHART, "fig-cdf-e2e")
    assert code_cdf["title"].endswith("(task = code)") and code_cdf["x"] != whole_cdf["x"]
    assert "not measured (n too small)" in page.inner_text("#headline")
    assert "slice=task%3Acode" in page.url
    page.screenshot(path=str(tmp_path / "slice.png"), full_page=True)
    # The whole-experiment charts outside the slice view were not redrawn away.
    assert page.locator("#fig-memory .main-svg").count() >= 1

    page.select_option("#slice-select", "all")
    page.wait_for_selector('#slice-view[data-slice="all"]')
    page.wait_for_function("document.querySelectorAll('#slice-view .js-plotly-plot .main-svg').length >= 4")
    assert page.evaluate(TABLE_COUNTS) == ["100 (0)", "100 (0)"]
    assert page.evaluate("window.__csp") == []


def test_it_sends_one_request_per_choice_and_shows_the_slice_chosen_last(page, live_server, viewer, settings):  # noqa: F811
    """Choose a slice and press Show, five times over: one request per choice (the old selector
    sent 2, 4, 8, ... as each answer bound its listeners again), and the view shows the slice
    selected, also when a newer choice overtakes an answer still on its way."""
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    settings.SPECREVIEW_CSP = True
    experiment = experiment_synthesize(n_requests=50, ks=(2,), loads="1x", repeats=2, seed=7)
    comparison_refresh(experiment_id=experiment.pk, n_boot=200)
    _login(page, live_server, viewer)
    page.goto(f"{live_server.url}/analysis/experiments/{experiment.pk}/")
    page.wait_for_selector('#slice-view[data-slice="all"]')
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if "slice=" in r.url and r.resource_type == "fetch" else None)
    values = page.evaluate("Array.from(document.querySelectorAll('#slice-select option')).map(o => o.value)")
    choices = [v for v in values if v != "all"][:4] + ["all"]
    assert len(choices) == 5, values
    for n, value in enumerate(choices, start=1):
        page.select_option("#slice-select", value)
        page.click("#slice-form [type=submit]")
        page.wait_for_selector(f'#slice-view[data-slice="{value}"]:not([aria-busy])')
        page.wait_for_timeout(300)  # a duplicate request would have been sent by now
        assert len(sent) == n, sent
        assert page.eval_on_selector("#slice-select", "el => el.value") == value
    # Two quick choices: the second overtakes the first, and the view ends on the second.
    page.select_option("#slice-select", choices[0])
    page.select_option("#slice-select", choices[1])
    page.wait_for_selector(f'#slice-view[data-slice="{choices[1]}"]:not([aria-busy])')
    page.wait_for_timeout(500)
    assert page.get_attribute("#slice-view", "data-slice") == choices[1]
    assert page.eval_on_selector("#slice-select", "el => el.value") == choices[1]
