"""The API's contract: a valid OpenAPI 3.1 document derived from the code that validates requests,
one JSON error shape for every failure (services' own exceptions included), and the upload size
limit applied before the body is read, for token and session requests alike."""

from __future__ import annotations

import io
import json

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

from console.errors import Conflict
from console.experiments.models import Experiment
from console.traces.models import Trace
from tests.experiments.factories import experiment_make, trace_make

pytestmark = pytest.mark.django_db

ROWS = "".join(
    json.dumps({"id": f"r{i}", "arrival_s": i, "prompt": "p" * 40, "max_tokens": 8}) + "\n" for i in range(60)
)


def _document(client, user, api_token_for) -> dict:
    response = client.get("/api/openapi.json", **api_token_for(user))
    assert response.status_code == 200
    return response.json()


def test_it_publishes_a_document_that_validates_as_openapi_3_1(client, viewer, api_token_for):
    from openapi_spec_validator import validate
    from openapi_spec_validator.validation import OpenAPIV31SpecValidator

    document = _document(client, viewer, api_token_for)
    assert document["openapi"].startswith("3.1")
    validate(document, cls=OpenAPIV31SpecValidator)


def test_it_declares_every_path_parameter(client, viewer, api_token_for):
    paths = _document(client, viewer, api_token_for)["paths"]
    templated = [p for p in paths if "{" in p]
    assert len(templated) >= 8
    for path in templated:
        for method, op in paths[path].items():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == {"id"}, f"{method.upper()} {path}"


def test_it_declares_the_request_bodies_the_server_checks(client, viewer, api_token_for):
    document = _document(client, viewer, api_token_for)
    body = document["paths"]["/api/experiments"]["post"]["requestBody"]["content"]["application/json"]
    schema = document["components"]["schemas"][body["schema"]["$ref"].rsplit("/", 1)[-1]]
    assert {"trace", "target_model", "candidates"} <= set(schema["required"])
    assert schema["additionalProperties"] is False
    assert schema["properties"]["repeats"]["maximum"] >= 1
    signoff = document["paths"]["/api/decisions/{id}/signoff"]["post"]
    assert "requestBody" in signoff and "x-permission" in signoff
    upload = document["paths"]["/api/traces"]["post"]
    assert "413" in upload["responses"] and "multipart/form-data" in upload["requestBody"]["content"]


def test_it_refuses_unknown_and_mistyped_fields_naming_them(client, engineer, api_token_for):
    trace = trace_make(prompts=["a"])
    body = {"trace": trace.pk, "target_model": "m", "candidates": [{"speculative_config": {}}]}
    for extra, field in (({"bogus": 1}, "bogus"), ({"repeats": "three"}, "repeats")):
        response = client.post(
            "/api/experiments",
            json.dumps(body | extra),
            content_type="application/json",
            **api_token_for(engineer),
        )
        assert response.status_code == 400, response.content
        assert field in response.json()["details"] and field in response.json()["error"]
    assert not Experiment.objects.exists()


def test_it_maps_a_service_validation_error_to_400_with_its_field(
    client, engineer, api_token_for, monkeypatch
):
    from console.experiments import api as experiments_api

    def refuse(**kwargs):
        raise ValidationError({"baseline_engine_args.dtype": ["dtype must be one of float32, bfloat16"]})

    monkeypatch.setattr(experiments_api, "experiment_create", refuse)
    trace = trace_make(prompts=["a"])
    body = {"trace": trace.pk, "target_model": "m", "candidates": [{"speculative_config": {}}]}
    response = client.post(
        "/api/experiments", json.dumps(body), content_type="application/json", **api_token_for(engineer)
    )
    assert response.status_code == 400
    assert response.json()["details"] == {
        "baseline_engine_args.dtype": ["dtype must be one of float32, bfloat16"]
    }
    assert "baseline_engine_args.dtype" in response.json()["error"]


def test_it_maps_a_conflict_to_409(client, engineer, api_token_for, monkeypatch):
    from console.experiments import api as experiments_api

    def clash(**kwargs):
        raise Conflict("the experiment already finished")

    monkeypatch.setattr(experiments_api, "experiment_cancel", clash)
    experiment = experiment_make(trace=trace_make(prompts=["a"]), created_by=engineer)
    response = client.post(f"/api/experiments/{experiment.pk}/cancel", **api_token_for(engineer))
    assert response.status_code == 409
    assert response.json() == {"error": "the experiment already finished"}


def test_it_answers_a_method_it_does_not_serve_with_a_json_405(client, viewer, api_token_for):
    response = client.put("/api/traces", **api_token_for(viewer))
    assert response.status_code == 405
    assert "PUT" in response.json()["error"] and set(response["Allow"].split(", ")) == {"GET", "POST"}


def test_it_refuses_a_scalar_query_parameter_given_twice(client, viewer, api_token_for):
    response = client.get("/api/decisions?model=a&model=b", **api_token_for(viewer))
    assert response.status_code == 400 and "model" in response.json()["details"]
    assert client.get("/api/decisions?model=a", **api_token_for(viewer)).status_code == 200


def test_it_requires_the_csrf_token_for_session_writes(engineer):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(engineer)
    upload = {"file": SimpleUploadedFile("t.jsonl", ROWS.encode())}
    response = client.post("/api/traces", upload)
    assert response.status_code == 403 and response.json()["error"] == "CSRF check failed"
    client.get("/traces/")  # a page sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    upload = {"file": SimpleUploadedFile("t.jsonl", ROWS.encode())}
    response = client.post("/api/traces", upload, HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 201, response.content


class CountingInput(io.BytesIO):
    """wsgi.input that records how many body bytes the app read."""

    consumed = 0

    def read(self, size=-1):
        data = super().read(size)
        self.consumed += len(data)
        return data

    def readline(self, size=-1):
        data = super().readline(size)
        self.consumed += len(data)
        return data


def _post_upload(app, *, body: bytes, headers: dict) -> tuple[int, dict, int]:
    stream = CountingInput(body)
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/traces",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": stream,
        "wsgi.errors": io.StringIO(),
        "CONTENT_TYPE": MULTIPART_CONTENT,
        "CONTENT_LENGTH": str(len(body)),
        **headers,
    }
    status: list[str] = []
    chunks = app(environ, lambda s, h, exc_info=None: status.append(s))
    payload = b"".join(chunks)
    return int(status[0].split()[0]), json.loads(payload), stream.consumed


def _session_headers(client, user) -> dict:
    client.force_login(user)
    secret = "s" * 32  # an unmasked CSRF secret is accepted in cookie and header alike
    cookie = f"sessionid={client.cookies['sessionid'].value}; csrftoken={secret}"
    return {"HTTP_COOKIE": cookie, "HTTP_X_CSRFTOKEN": secret}


@pytest.mark.parametrize("auth", ["token", "session"])
def test_it_refuses_an_oversized_upload_before_reading_a_byte(
    auth, client, engineer, api_token_for, wsgi_app, settings
):
    settings.SPECREVIEW_TRACE_MAX_BYTES = 1000
    big = ROWS.encode() * 2000  # ~6 MB, far over the limit plus the form's overhead
    body = encode_multipart(BOUNDARY, {"file": SimpleUploadedFile("big.jsonl", big)})
    headers = api_token_for(engineer) if auth == "token" else _session_headers(client, engineer)
    status, payload, consumed = _post_upload(wsgi_app, body=body, headers=headers)
    assert status == 413, payload
    assert "size limit of 1,000 bytes" in payload["error"]
    assert consumed == 0
    assert not Trace.objects.exists()


@pytest.mark.parametrize("auth", ["token", "session"])
def test_it_stops_an_upload_that_passes_the_limit_while_streaming(
    auth, client, engineer, api_token_for, wsgi_app, settings
):
    settings.SPECREVIEW_TRACE_MAX_BYTES = 1000
    body = encode_multipart(BOUNDARY, {"file": SimpleUploadedFile("t.jsonl", ROWS.encode() * 5)})
    headers = api_token_for(engineer) if auth == "token" else _session_headers(client, engineer)
    status, payload, _ = _post_upload(wsgi_app, body=body, headers=headers)
    assert status == 413, payload
    assert "stopped after" in payload["error"] and payload["details"]["errors"][0]["file"] == "upload"
    assert not Trace.objects.exists()
