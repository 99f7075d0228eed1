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
