"""Scrubbing error text and redacting stored configs (workers/engines/redaction.py)."""

from __future__ import annotations

import pytest

from workers.engines.redaction import REDACTED, config_redact, document_redact, text_scrub


@pytest.mark.parametrize(
    ("text", "gone"),
    [
        ("401: header was Authorization: Bearer abc.def-123_XYZ", "abc.def-123_XYZ"),
        ('{"detail": "invalid key sk-proj-A1b2C3d4E5f6"}', "sk-proj-A1b2C3d4E5f6"),
        ("bad request: api_key=supersecret99&model=x", "supersecret99"),
        ('upstream said {"api-key": "s3cr3t-value"}', "s3cr3t-value"),
        ("proxy http://svc:hunter2@10.0.0.4:8000/v1 refused", "hunter2"),
        ("token: ghp_0123456789abcdef", "ghp_0123456789abcdef"),
    ],
)
def test_it_scrubs_what_looks_like_a_credential_from_error_text(text, gone):
    scrubbed = text_scrub(text, secrets=())
    assert gone not in scrubbed and REDACTED in scrubbed


def test_it_scrubs_the_configured_credential_values_themselves(monkeypatch, settings):
    monkeypatch.setenv("SR_KEY", "plain-looking-value-42")
    settings.SPECREVIEW_OPENAI_CREDENTIALS = {"k": {"env": "SR_KEY"}}
    assert (
        text_scrub("the server logged plain-looking-value-42 twice") == f"the server logged {REDACTED} twice"
    )


def test_it_cuts_long_text_to_the_limit_and_says_how_much_was_cut():
    text = "é" * 3000  # 6000 bytes
    cut = text_scrub(text, secrets=(), limit=2048)
    kept = cut.split("...")[0]
    assert len(kept.encode()) <= 2048 and cut.endswith("more bytes cut]")
    assert text_scrub("short", secrets=()) == "short"


def test_it_leaves_ordinary_error_text_alone():
    text = "400: max_tokens=4096 exceeds max_model_len; num_speculative_tokens must be >= 1"
    assert text_scrub(text, secrets=()) == text


def test_it_redacts_secret_keys_of_a_stored_config_and_keeps_the_rest():
    stored = {
        "base_url": "http://h:8000/v1",
        "api_key": "sk-live-1234567890",
        "api_key_env": "DATABASE_URL",
        "extra_body": {"hf_token": "x", "max_num_batched_tokens": 512, "return_token_ids": True},
    }
    assert config_redact(stored) == {
        "base_url": "http://h:8000/v1",
        "api_key": REDACTED,
        "api_key_env": REDACTED,
        "extra_body": {"hf_token": REDACTED, "max_num_batched_tokens": 512, "return_token_ids": True},
    }


def test_it_leaves_checklist_and_gate_keys_alone_outside_configs():
    doc = {
        "checklist": [{"key": "current_serving_path", "detail": "args {'api_key': 'abc123xyz'}"}],
        "evidence": {"baseline": {"engine_args": {"key": "k-1"}}},
        "rationale": "Basic idea: bearer of the risk is on-call",
    }
    shown = document_redact(doc)
    assert shown["checklist"][0]["key"] == "current_serving_path"
    assert "abc123xyz" not in shown["checklist"][0]["detail"]
    assert shown["evidence"]["baseline"]["engine_args"]["key"] == REDACTED
    assert shown["rationale"] == doc["rationale"]
