"""Redaction at import (issue 24): planted secrets are never stored, never replayed, and the trace
says it was redacted."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from console.traces.models import Trace
from tests.experiments.factories import experiment_make
from tests.support.stored import stored_anywhere
from workers.execution import run_requests

pytestmark = pytest.mark.django_db

EMAIL = "zq.planted.mail@leak-example.org"
KEY = "sk-proj-PlantedKey0123456789abcdefXYZ"
CARD = "4111 1111 1111 1111"
IP = "203.0.113.77"
PLANTED = (EMAIL, KEY, CARD, IP)
FORM = {"holdout_fraction": "0.3", "seed": "0", "default_max_tokens": "64"}


def _rows():
    return [
        {
            "id": "r1",
            "arrival_s": 0,
            "prompt": f"Write to {EMAIL} about the card {CARD}; cc {EMAIL}.",
            "max_tokens": 8,
        },
        {
            "id": "r2",
            "arrival_s": 1,
            "messages": [
                {"role": "system", "content": f"Use the key {KEY}."},
                {"role": "user", "content": [{"type": "text", "text": f"Block {IP} and mail {EMAIL}"}]},
            ],
            "max_tokens": 8,
            "metadata": {"reference": f"sent to {EMAIL}"},
        },
        {"id": "r3", "arrival_s": 2, "prompt": "Nothing to hide here.", "max_tokens": 8},
    ]


def _file():
    return SimpleUploadedFile("prod.jsonl", "".join(json.dumps(r) + "\n" for r in _rows()).encode())


def test_planted_secrets_are_stored_nowhere_and_never_replayed(client, engineer, api_token_for):
    response = client.post(
        "/api/traces", {"file": _file(), "name": "prod", "redact": "true"}, **api_token_for(engineer)
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert "Redacted 4 e-mail addresses, 1 card number, 1 IP address and 1 key or token." in body["message"]
    for marker in PLANTED + ("4111",):
        assert stored_anywhere(marker) == [], marker
    trace = Trace.objects.get(pk=body["trace"]["id"])
    sent = run_requests(experiment=experiment_make(trace=trace))
    text = json.dumps([[r.prompt, r.messages, r.tools] for _, r in sent])
    assert not [m for m in PLANTED if m in text]
    # placeholders numbered within a request: the same address is the same placeholder
    first = next(r for _, r in sent if r.request_id == "r1")
    assert first.prompt == "Write to [EMAIL_1] about the card [CARD_1]; cc [EMAIL_1]."
    assert trace.metadata["redaction"]["replaced"] == {"EMAIL": 4, "CARD": 1, "IP": 1, "KEY": 1}


def test_without_redaction_the_same_file_is_another_trace_with_another_hash(client, engineer, api_token_for):
    auth = api_token_for(engineer)
    redacted = client.post("/api/traces", {"file": _file(), "redact": "true"}, **auth).json()["trace"]
    plain = client.post("/api/traces", {"file": _file()}, **auth)
    assert plain.status_code == 201
    assert plain.json()["trace"]["id"] != redacted["id"]
    assert plain.json()["trace"]["content_sha256"] != redacted["content_sha256"]
    assert stored_anywhere(EMAIL)  # the search itself finds what is there


def test_the_trace_page_says_it_was_redacted(client, engineer, api_token_for):
    extra = "EMPLOYEE=EMP-\\d{6}"
    body = client.post(
        "/api/traces",
        {"file": _file(), "redact": "true", "redact_patterns": extra},
        **api_token_for(engineer),
    ).json()
    client.force_login(engineer)
    page = client.get(f"/traces/{body['trace']['id']}/").content.decode()
    assert 'id="redaction-notice"' in page and "Redacted at import." in page
    assert "Your own patterns: EMPLOYEE." in page
    assert EMAIL not in page


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"redact": "true", "redact_patterns": "BAD=("}, "not a regular expression"),
        ({"redact_patterns": "EMPLOYEE=EMP-\\d{6}"}, "given without redact"),
    ],
)
def test_a_bad_redaction_option_is_a_400_naming_the_field_and_stores_nothing(
    client, engineer, api_token_for, fields, message
):
    response = client.post("/api/traces", {"file": _file(), **fields}, **api_token_for(engineer))
    assert response.status_code == 400
    assert message in response.content.decode() and "redact_patterns" in response.content.decode()
    assert not Trace.objects.exists()


def test_the_upload_form_refuses_a_bad_pattern_on_its_field(client, engineer):
    client.force_login(engineer)
    response = client.post(
        "/traces/upload/", {"file": _file(), **FORM, "redact": "on", "redact_patterns": "x=1"}
    )
    assert response.status_code == 400  # the upload page answers a bad form with 400 and the form again
    page = response.content.decode()
    assert "must be capitals" in page and page.count('class="errorlist') == 1
    assert not Trace.objects.exists()


def test_the_preview_shows_the_text_as_redaction_would_store_it(client, engineer):
    client.force_login(engineer)
    response = client.post("/traces/upload/", {"file": _file(), **FORM, "redact": "on", "preview": "1"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "[EMAIL_1]" in page
    assert EMAIL not in page and KEY not in page
