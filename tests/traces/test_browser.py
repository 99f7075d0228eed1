"""The upload page in real Chromium: the XHR upload with its progress bar, then the trace page's charts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.chromium import chromium_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
BAD = Path(__file__).parent / "bad"


@pytest.fixture
def page(live_server):
    with chromium_browser() as browser:
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        page.set_default_timeout(30000)
        yield page


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


def test_it_previews_a_field_mapping_in_place_then_imports_it(page, live_server, engineer, tmp_path):
    import gzip

    from console.traces.models import Trace

    path = tmp_path / "set.jsonl.gz"
    items = [{"ex": {"ask": f"<b>Question</b> {i}?"}, "gold": str(i)} for i in range(9)]
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in items).encode()))
    _login(page, live_server, engineer)
    page.set_input_files("input[name=file]", str(path))
    page.fill("input[name=prompt_field]", "ex.ask")
    page.fill("input[name=keep_fields]", "gold")
    page.click("#preview-button")
    page.wait_for_selector("#preview .preview-requests")
    assert page.url.endswith("/traces/upload/")  # in place: the form keeps its file
    assert page.locator("#preview .preview-requests tbody tr").count() == 5
    assert "<b>Question</b> 0?" in page.inner_text("#preview")  # escaped, shown as text
    assert not Trace.objects.exists()
    page.click("button.primary")
    page.wait_for_url(re.compile(r"/traces/\d+/$"))
    trace = Trace.objects.get()
    assert trace.source_format == "mapped" and trace.request_count == 9
