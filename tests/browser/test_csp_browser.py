"""Under the production Content-Security-Policy (script-src 'self'), the pages still work in real
Chromium: charts draw from their JSON data blocks and nothing is blocked."""

from __future__ import annotations

import pytest

from tests.browser.test_console_browser import _login, page  # noqa: F401  (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WATCH = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
"""


def test_it_draws_every_chart_with_no_policy_violation(page, live_server, viewer, settings):  # noqa: F811
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    settings.SPECREVIEW_CSP = True
    experiment = experiment_synthesize(n_requests=40, repeats=2)
    comparison_refresh(experiment_id=experiment.pk, n_boot=300)  # what the worker's task does
    run = experiment.runs.filter(status="done").first()
    page.add_init_script(WATCH)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    _login(page, live_server, viewer)
    checks = [
        (f"/analysis/experiments/{experiment.pk}/", 9),
        (f"/traces/{experiment.trace_id}/", 1),
        (f"/analysis/runs/{run.pk}/", 1),
    ]
    for path, charts in checks:
        response = page.goto(f"{live_server.url}{path}")
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {charts}")
        assert page.evaluate("window.__csp") == [], path
    # the run page's table filter is a static script too
    page.fill("#filter", "zzzz-no-such-request")
    assert page.locator("#requests tbody tr:visible").count() == 0
    assert not [e for e in errors if "Content Security Policy" in e], errors


def test_it_renders_the_interactive_api_docs_offline_with_no_policy_violation(page, live_server, viewer, settings):  # noqa: F811
    """django-ninja's Swagger UI, from this console's static files: every operation of the OpenAPI
    document listed, nothing fetched from another origin, nothing blocked by the policy."""
    settings.SPECREVIEW_CSP = True
    page.add_init_script(WATCH)
    elsewhere: list[str] = []
    page.on("request", lambda r: elsewhere.append(r.url) if not r.url.startswith(live_server.url) else None)
    _login(page, live_server, viewer)
    page.click("nav >> text=API")
    page.wait_for_selector("#swagger-ui .opblock")
    operations = page.locator("#swagger-ui .opblock").count()
    document = page.evaluate("fetch('/api/openapi.json').then(r => r.json())")
    expected = sum(len(methods) for methods in document["paths"].values())
    assert operations == expected >= 10
    assert page.evaluate("window.__csp") == [] and elsewhere == []
