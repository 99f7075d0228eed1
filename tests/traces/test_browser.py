"""The upload page in real Chromium: the XHR upload with its progress bar, then the trace page's charts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
CHROMIUM = os.environ.get("SPECREVIEW_CHROMIUM", "/usr/bin/chromium")
BAD = Path(__file__).parent / "bad"


@pytest.fixture
def page(live_server):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (bin/ensure-chromium installs it)")
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        page.set_default_timeout(30000)
        yield page
        browser.close()


def _login(page, live_server, user):
    from tests.conftest import PASSWORD

    page.goto(f"{live_server.url}/traces/upload/")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/traces/upload/")


def test_it_uploads_through_the_page_and_draws_the_trace_charts(page, live_server, engineer, tmp_path):
    from console.traces.models import Trace

    path = tmp_path / "page.jsonl"
    rows = [
        {
            "id": f"r{i}",
            "arrival_s": i * 0.2,
            "prompt": "<script>window.pwned=1</script> " * (1 + i % 7),
            "max_tokens": 8 + i,
        }
        for i in range(400)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _login(page, live_server, engineer)
    page.set_input_files("input[name=file]", str(path))
    page.fill("input[name=name]", "from the browser")
    page.click("button[type=submit]")
    assert page.locator("#upload-progress").is_visible()
    page.wait_for_url(re.compile(r"/traces/\d+/$"))
    trace = Trace.objects.get()
    assert page.url.endswith(f"/traces/{trace.pk}/")
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert page.locator(".js-plotly-plot").count() == 3
    assert page.evaluate("window.pwned === undefined")
    assert page.locator("#sample-requests tbody tr").count() == 12


def test_it_shows_the_errors_of_a_bad_file_after_an_xhr_upload(page, live_server, engineer):
    _login(page, live_server, engineer)
    page.set_input_files("input[name=file]", str(BAD / "unknown_class.jsonl"))
    page.click("button[type=submit]")
    page.wait_for_selector("#import-errors")
    assert "urgent" in page.inner_text("#import-errors")
