"""The JSON API: multipart upload with token auth, 400 with every error, list, detail, requests, OpenAPI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from console.traces.models import Trace

pytestmark = pytest.mark.django_db
BAD = Path(__file__).parent / "bad"


def _file(rows, name="t.jsonl"):
    return SimpleUploadedFile(name, "".join(json.dumps(r) + "\n" for r in rows).encode())


ROWS = [
    {"id": f"r{i}", "arrival_s": i, "prompt": f"p{i}", "max_tokens": 8, "class": "batch"} for i in range(10)
]


def test_it_uploads_lists_and_shows_traces_with_a_token(client, engineer, api_token_for):
    auth = api_token_for(engineer)
    response = client.post(
        "/api/traces", {"file": _file(ROWS), "name": "api", "holdout": "0.5", "seed": "3"}, **auth
    )
    assert response.status_code == 201, response.content
    body = response.json()
    trace_id = body["trace"]["id"]
    assert (
        body["created"] and body["trace"]["request_count"] == 10 and body["trace"]["holdout_fraction"] == 0.5
    )
    again = client.post(
        "/api/traces", {"file": _file(ROWS), "name": "api", "holdout": "0.5", "seed": "3"}, **auth
    )
    assert (
        again.status_code == 200 and again.json()["trace"]["id"] == trace_id and not again.json()["created"]
    )
    listing = client.get("/api/traces", **auth).json()
    assert [t["id"] for t in listing["traces"]] == [trace_id]
    detail = client.get(f"/api/traces/{trace_id}", **auth).json()
    assert detail["summary"]["by_class"] == {"batch": 10}
    requests = client.get(f"/api/traces/{trace_id}/requests?limit=3&offset=2", **auth).json()
    assert [r["id"] for r in requests["requests"]] == ["r2", "r3", "r4"] and requests["count"] == 10
    holdout = client.get(f"/api/traces/{trace_id}/requests?split=holdout", **auth).json()
    assert {r["split"] for r in holdout["requests"]} <= {"holdout"}
    assert client.get("/api/traces/999999", **auth).status_code == 404


def test_it_returns_every_error_as_400_json(client, engineer, api_token_for):
    upload = SimpleUploadedFile("bad.jsonl", (BAD / "unknown_class.jsonl").read_bytes())
    response = client.post("/api/traces", {"file": upload}, **api_token_for(engineer))
    assert response.status_code == 400
    body = response.json()
    assert body["error"].startswith("invalid trace:")
    assert body["details"]["errors"][0] == {
        "line": 2,
        "field": "class",
        "message": 'must be one of "interactive", "batch", got "urgent"',
        "file": "bad.jsonl",
    }
    assert not Trace.objects.exists()


def test_it_refuses_uploads_without_the_permission_or_a_token(client, viewer, api_token_for):
    assert client.post("/api/traces", {"file": _file(ROWS)}).status_code == 401
    assert client.post("/api/traces", {"file": _file(ROWS)}, **api_token_for(viewer)).status_code == 403
    assert client.get("/api/traces", **api_token_for(viewer)).status_code == 200
    assert not Trace.objects.exists()


def test_it_documents_the_endpoints_in_openapi(client, engineer, api_token_for):
    paths = client.get("/api/openapi.json", **api_token_for(engineer)).json()["paths"]
    assert set(paths["/api/traces"]) == {"get", "post"}
    assert "multipart/form-data" in paths["/api/traces"]["post"]["requestBody"]["content"]
    assert "/api/traces/{id}" in paths and "/api/traces/{id}/requests" in paths


def test_it_imports_a_field_mapped_prompt_set_and_locates_a_bad_mapping(client, engineer, api_token_for):
    import gzip

    auth = api_token_for(engineer)
    items = [{"doc": {"text": f"Summarise note {i}."}, "ref": f"s{i}", "n": i} for i in range(6)]
    content = gzip.compress("".join(json.dumps(r) + "\n" for r in items).encode())
    data = {
        "file": SimpleUploadedFile("notes.jsonl.gz", content),
        "prompt_field": "doc.text",
        "keep_field": ["ref", "n"],
        "task": "summarization",
        "arrival": "poisson:1",
    }
    response = client.post("/api/traces", data, **auth)
    assert response.status_code == 201, response.content
    trace = Trace.objects.get(pk=response.json()["trace"]["id"])
    assert trace.source_format == "mapped" and trace.request_count == 6
    assert trace.requests.get(request_id="record-2").metadata == {"ref": "s1", "n": 1}
    assert set(trace.requests.values_list("task", flat=True)) == {"summarization"}
    bad = client.post(
        "/api/traces",
        {"file": SimpleUploadedFile("notes.jsonl.gz", content), "prompt_field": "doc.body"},
        **auth,
    )
    assert bad.status_code == 400
    first = bad.json()["details"]["errors"][0]
    assert (first["file"], first["line"], first["field"]) == ("notes.jsonl.gz", 1, "doc.body")
    too_many = client.post(
        "/api/traces",
        {
            "file": SimpleUploadedFile("n.jsonl", b"{}"),
            "prompt_field": "a",
            "keep_field": [f"k{i}" for i in range(17)],
        },
        **auth,
    )
    assert too_many.status_code == 400 and Trace.objects.count() == 1
    schema = client.get("/api/openapi.json", **auth).json()
    body = schema["paths"]["/api/traces"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    props = json.dumps(body) + json.dumps(schema.get("components", {}))
    assert "prompt_field" in props and "keep_field" in props


def test_it_answers_400_for_hostile_mapping_fields(client, engineer, api_token_for):
    auth = api_token_for(engineer)
    for fields in (
        {"prompt_field": "a" * 201},
        {"prompt_field": "q\x00"},
        {"id_field": "uid"},
        {"prompt_field": "q", "format": "native"},
    ):
        upload = SimpleUploadedFile("t.jsonl", b'{"q": "hello"}\n')
        response = client.post("/api/traces", {"file": upload, **fields}, **auth)
        assert response.status_code == 400, (fields, response.content)
        assert response.json()["error"]
    assert not Trace.objects.exists()
