"""The console in real Chromium (Debian's, driven by Playwright): log in, follow the nav, see
the comparison charts draw."""

from __future__ import annotations

import pytest

from tests.support.chromium import chromium_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(live_server):
    with chromium_browser() as browser:
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        page.set_default_timeout(20000)
        yield page


def _login(page, live_server, user):
    from tests.conftest import PASSWORD

    page.goto(f"{live_server.url}/experiments/")
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/experiments/")


def test_it_logs_in_and_draws_the_comparison_charts(page, live_server, viewer, tmp_path):
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=60, repeats=2)
    comparison_refresh(experiment_id=experiment.pk, n_boot=300)  # what the worker's task does
    _login(page, live_server, viewer)
    assert page.locator("text=New experiment").count() == 0  # a viewer is not offered mutations
    page.click(f"text={experiment.name}")
    page.click("text=Comparison")
    # Nine charts: two CDFs, two load curves, three acceptance views, the sweep, memory.
    page.wait_for_load_state("load")
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 9")
    assert page.locator('h2:has-text("Quality regressions")').count() == 1
    page.screenshot(path=str(tmp_path / "comparison.png"), full_page=True)


def test_it_refuses_the_new_experiment_form_to_a_viewer_but_shows_it_to_an_engineer(
    page, live_server, engineer
):
    _login(page, live_server, engineer)
    page.click("text=New experiment")
    assert page.locator("textarea[name=candidates]").count() == 1
    page.fill("input[name=name]", "")
    page.click("button[type=submit]")
    assert page.locator(".error").count() >= 1  # errors shown next to the fields
