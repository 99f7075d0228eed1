"""NaN, Infinity and 1e999 (Python's JSON parser turns them into non-finite floats) are refused
with a 400 that names them, in API bodies and in the forms' JSON fields, and nothing is stored."""

from __future__ import annotations

import json

import pytest

from console.experiments.models import Experiment

pytestmark = pytest.mark.django_db


def _body(trace_id: int, extra: str) -> str:
    body = {
        "trace": trace_id,
        "target_model": "smollm2-135m",
        "start": False,
        "candidates": [{"label": "ngram", "speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
        "capacity_search": {"slo": {"traffic_class": "interactive", "attainment": "@", "p95_tpot_s": 0.2}},
    }
    return json.dumps(body).replace('"@"', extra)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_the_api_refuses_a_non_finite_number_anywhere_in_a_body(engineer, api_token_for, client, number):
    from tests.support.synthetic import experiment_synthesize

    trace = experiment_synthesize(n_requests=10, ks=(2,), loads="1x", repeats=1).trace
    before = Experiment.objects.count()
    response = client.post(
        "/api/experiments", data=_body(trace.pk, number), content_type="application/json", **api_token_for(engineer)
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error.startswith("Cannot parse request body: ") and number.lstrip("-") in error
    assert Experiment.objects.count() == before
    # the same body with a finite number is taken (so the refusal is the number's)
    ok = client.post(
        "/api/experiments", data=_body(trace.pk, "0.9"), content_type="application/json", **api_token_for(engineer)
    )
    assert ok.status_code == 400 or ok.status_code == 201
    assert "Cannot parse" not in ok.content.decode()


def test_a_body_that_is_not_json_says_where(engineer, api_token_for, client):
    response = client.post("/api/experiments", data='{"trace": 1,', content_type="application/json", **api_token_for(engineer))
    assert response.status_code == 400
    assert response.json()["error"].startswith("Cannot parse request body: Expecting")


@pytest.mark.parametrize("number", ["NaN", "Infinity", "1e999"])
def test_a_form_json_field_refuses_a_non_finite_number(number):
    from django import forms

    from console.experiments.forms import JSONField

    with pytest.raises(forms.ValidationError) as caught:
        JSONField().clean('{"interactive": {"e2e_s": ' + number + "}}")
    assert "not valid JSON" in caught.value.messages[0] and number in caught.value.messages[0]
    assert JSONField().clean('{"interactive": {"e2e_s": 10}}') == {"interactive": {"e2e_s": 10}}
