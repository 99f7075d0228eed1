"""Trace pages: upload with errors shown, list, detail with figures and notices, escaping, delete."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from console.traces.models import Trace
from console.traces.services import trace_import_path

pytestmark = pytest.mark.django_db
BAD = Path(__file__).parent / "bad"


def _upload(client, content: bytes, name="t.jsonl", **fields):
    data = {
        "file": SimpleUploadedFile(name, content),
        "holdout_fraction": "0.3",
        "seed": "0",
        "default_max_tokens": "64",
    }
    data.update(fields)
    return client.post("/traces/upload/", data)


def _native(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


HOSTILE = "<script>alert('x')</script><b>bold</b>"


def test_it_uploads_a_trace_and_shows_its_page(engineer_client):
    rows = [
        {
            "id": f"r{i}",
            "arrival_s": i * 0.5,
            "prompt": f"p {i}",
            "max_tokens": 16,
            "task": ["code", "chat"][i % 2],
        }
        for i in range(30)
    ]
    response = _upload(engineer_client, _native(rows), name="Mine")
    trace = Trace.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/traces/{trace.pk}/"
    page = engineer_client.get(response["Location"])
    html = page.content.decode()
    assert page.status_code == 200
    assert "Arrival rate" in html and "Prompt length" in html and "Output length" in html
    assert 'id="task-class-counts"' in html and "<td>code</td>" in html
    assert re.search(r"plotly/plotly\.min(\.[0-9a-f]+)?\.js", html)  # the hashed name when static files are collected
    assert 'id="pairing-notice"' not in html
    listing = engineer_client.get("/traces/").content.decode()
    assert f"/traces/{trace.pk}/" in listing


def test_it_shows_the_lengths_of_a_trace_whose_import_stored_no_summary(engineer_client):
    """Only a file import writes ``Trace.summary``; a trace built otherwise (the synthetic one here)
    has an empty one, and its page read empty numbers ("mean , max", "()")."""
    from console.traces.models import TraceRequest

    trace = Trace.objects.create(name="built", sha256="0" * 64, source_format="synthetic", request_count=3)
    TraceRequest.objects.bulk_create(
        [
            TraceRequest(trace=trace, position=i, request_id=f"s{i}", arrival_s=0.5 * i, prompt="p",
                         max_tokens=16 * (i + 1), prompt_tokens=10 * (i + 1), split="train",
                         tools=[{"type": "function"}] if i == 0 else None)
            for i in range(3)
        ]
    )  # fmt: skip
    html = engineer_client.get(f"/traces/{trace.pk}/").content.decode()
    assert "Prompt length: mean 20.0 tokens, max 30 tokens" in html
    assert "mean 32.0 tokens, max 48 tokens" in html
    assert "requests over 1.00 s (3.00 requests/s)" in html and "With tools 1 " in html
    assert "()" not in html and "mean ," not in html


def test_it_answers_an_xhr_upload_with_the_page_to_go_to(engineer_client):
    content = _native([{"id": "a", "arrival_s": 0, "prompt": "x", "max_tokens": 3}])
    response = engineer_client.post(
        "/traces/upload/",
        {
            "file": SimpleUploadedFile("a.jsonl", content),
            "holdout_fraction": "0.3",
            "seed": "0",
            "default_max_tokens": "8",
        },
        HTTP_X_REQUESTED_WITH="XMLHttpRequest",
    )
    assert response.status_code == 200
    assert response.json() == {"redirect": f"/traces/{Trace.objects.get().pk}/"}


def test_it_shows_every_error_of_a_bad_upload_and_stores_nothing(engineer_client):
    response = _upload(engineer_client, (BAD / "duplicate_ids.jsonl").read_bytes(), name="dup.jsonl")
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="import-errors"' in html and "duplicate id" in html and "dup.jsonl" in html
    assert not Trace.objects.exists()


def test_it_escapes_prompt_text_and_metadata_everywhere(engineer_client):
    rows = [
        {
            "id": HOSTILE,
            "arrival_s": 0,
            "messages": [{"role": "user", "content": HOSTILE}],
            "max_tokens": 8,
            "task": HOSTILE,
            "metadata": {"note": HOSTILE, "<img src=x onerror=alert(1)>": 1},
        },
        {"id": "b", "arrival_s": 1, "prompt": HOSTILE + "<img src=x onerror=alert(2)>", "max_tokens": 8},
    ]
    response = _upload(engineer_client, _native(rows), name=HOSTILE)
    trace = Trace.objects.get()
    for url in (response["Location"], "/traces/", "/"):
        html = engineer_client.get(url).content.decode()
        assert "<script>alert" not in html, url
        assert "<b>bold</b>" not in html, url
        assert "<img src=x" not in html, url
    html = engineer_client.get(f"/traces/{trace.pk}/").content.decode()
    assert "&lt;script&gt;alert(" in html


def test_it_says_plainly_that_a_timing_trace_is_paired(engineer_client, engineer, shared_data):
    trace = trace_import_path(
        path=shared_data / "traces/burstgpt/BurstGPT_1.first400.csv",
        uploaded_by=engineer,
        pair_with=str(shared_data / "prompts/vicuna_bench/question.jsonl"),
    ).trace
    html = engineer_client.get(f"/traces/{trace.pk}/").content.decode()
    assert 'id="pairing-notice"' in html and "not this trace&#x27;s real prompts" in html
    assert "question.jsonl" in html
    assert 'id="validation-warnings"' in html and "Skipped 17 requests" in html
    assert "paired, not real prompts" in engineer_client.get("/traces/").content.decode()


def test_it_pairs_from_the_upload_form_with_a_stored_prompt_trace(engineer_client, engineer, shared_data):
    pool = trace_import_path(
        path=shared_data / "prompts/humaneval/HumanEval.jsonl", uploaded_by=engineer
    ).trace
    page = engineer_client.get("/traces/upload/").content.decode()
    assert f'value="trace:{pool.pk}"' in page
    content = (shared_data / "traces/burstgpt/BurstGPT_1.first400.csv").read_bytes()
    response = _upload(engineer_client, content, name="burst.csv", pair_with=f"trace:{pool.pk}")
    assert response.status_code == 302
    paired = Trace.objects.exclude(pk=pool.pk).get()
    assert paired.is_paired and f"trace {pool.pk}" in paired.paired_with


def test_it_refuses_server_paths_from_the_upload_form(engineer_client, shared_data):
    content = (BAD / "empty.jsonl").read_bytes() + b'{"id": "a", "prompt": "x", "max_tokens": 3}\n'
    response = _upload(
        engineer_client, content, arrival=f"borrow:{shared_data}/traces/burstgpt/BurstGPT_1.first400.csv"
    )
    assert response.status_code == 400
    assert "not a path" in response.content.decode()


def test_it_stops_an_oversized_upload(engineer_client, settings):
    settings.SPECREVIEW_TRACE_MAX_BYTES = 2000
    content = _native(
        [{"id": f"r{i}", "arrival_s": i, "prompt": "x" * 50, "max_tokens": 3} for i in range(100)]
    )
    response = _upload(engineer_client, content)
    assert response.status_code == 413
    assert "larger than the size limit of 2,000 bytes" in response.content.decode()
    assert not Trace.objects.exists()


def test_it_refuses_uploads_and_deletes_to_viewers(viewer_client, engineer, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(_native([{"id": "a", "arrival_s": 0, "prompt": "x", "max_tokens": 3}]))
    trace = trace_import_path(path=path, uploaded_by=engineer).trace
    assert viewer_client.get("/traces/upload/").status_code == 403
    assert _upload(viewer_client, path.read_bytes()).status_code == 403
    assert viewer_client.post(f"/traces/{trace.pk}/delete/").status_code == 403
    page = viewer_client.get(f"/traces/{trace.pk}/").content.decode()
    assert (
        "Delete trace" not in page and "Upload a trace" not in viewer_client.get("/traces/").content.decode()
    )


def test_it_refuses_to_delete_a_trace_in_use_with_a_clear_message(engineer_client, engineer, tmp_path):
    from console.experiments.models import Experiment
    from tests.experiments.factories import experiment_make

    path = tmp_path / "t.jsonl"
    path.write_bytes(_native([{"id": "a", "arrival_s": 0, "prompt": "x", "max_tokens": 3}]))
    trace = trace_import_path(path=path, uploaded_by=engineer).trace
    experiment_make(name="exp-1", trace=trace)
    response = engineer_client.post(f"/traces/{trace.pk}/delete/", follow=True)
    assert "used by 1 experiment" in response.content.decode()
    assert Trace.objects.filter(pk=trace.pk).exists()
    Experiment.objects.all().delete()
    response = engineer_client.post(f"/traces/{trace.pk}/delete/")
    assert response.status_code == 302 and not Trace.objects.exists()


NESTED_SET = [
    {"item": {"ask": f"Name a prime above {i * 10}."}, "key": f"p{i}", "gold": {"answer": str(i)}}
    for i in range(8)
]
MAPPING_FIELDS = {
    "prompt_field": "item.ask",
    "id_field": "key",
    "keep_fields": "gold.answer",
    "default_task": "math",
}


def test_it_imports_a_prompt_set_with_the_field_mapping(engineer_client):
    import gzip

    content = gzip.compress(_native(NESTED_SET))
    response = _upload(engineer_client, content, name="set.jsonl.gz", arrival="constant:2", **MAPPING_FIELDS)
    assert response.status_code == 302, response.content.decode()[:2000]
    trace = Trace.objects.get()
    assert trace.source_format == "mapped" and trace.request_count == 8
    request = trace.requests.get(request_id="p3")
    assert request.prompt == "Name a prime above 30." and request.task == "math"
    assert request.metadata["gold.answer"] == "3" and trace.metadata["compression"]["format"] == "gzip"


def test_it_previews_the_mapping_and_stores_nothing(engineer_client):
    response = _upload(engineer_client, _native(NESTED_SET), preview="1", **MAPPING_FIELDS)
    page = response.content.decode()
    assert response.status_code == 200 and 'id="preview"' in page
    assert "Name a prime above 40." in page and "Name a prime above 50." not in page  # the first five
    assert "&quot;gold.answer&quot;: &quot;4&quot;" in page and 'value="item.ask"' in page
    fragment = engineer_client.post(
        "/traces/upload/",
        {
            "file": SimpleUploadedFile("s.jsonl", _native(NESTED_SET)),
            "holdout_fraction": "0.3",
            "seed": "0",
            "default_max_tokens": "64",
            "preview": "1",
            **MAPPING_FIELDS,
        },
        headers={"X-Requested-With": "XMLHttpRequest"},
    )
    assert fragment.status_code == 200 and fragment.content.decode().lstrip().startswith(
        '<section class="card" id="preview">'
    )
    assert not Trace.objects.exists()


def test_it_shows_where_a_mapping_does_not_fit(engineer_client):
    rows = [*NESTED_SET[:2], {"item": {}, "key": "p9", "gold": {"answer": "9"}}]
    preview = _upload(engineer_client, _native(rows), preview="1", **MAPPING_FIELDS).content.decode()
    assert "item.ask" in preview and "is missing: the prompt must be non-empty text" in preview
    response = _upload(engineer_client, _native(rows), **MAPPING_FIELDS)
    assert (
        response.status_code == 400
        and "is missing: the prompt must be non-empty text" in response.content.decode()
    )
    bad_form = _upload(engineer_client, _native(rows), prompt_field="a..b", keep_fields="ok, x..y")
    page = bad_form.content.decode()
    assert (
        bad_form.status_code == 400
        and "&#x27;a..b&#x27; has an empty part" in page
        and "&#x27;x..y&#x27;" in page
    )
    assert not Trace.objects.exists()


def test_it_refuses_a_gzip_bomb_from_the_upload_page(engineer_client, settings):
    import gzip

    settings.SPECREVIEW_TRACE_MAX_BYTES = 1 << 20
    bomb = gzip.compress(_native([{"id": "x", "arrival_s": 0, "prompt": "p", "max_tokens": 1}]) * 100_000, 9)
    response = _upload(engineer_client, bomb, name="bomb.jsonl.gz")
    assert (
        response.status_code == 400
        and "decompresses to more than the size limit" in response.content.decode()
    )
    assert not Trace.objects.exists()
