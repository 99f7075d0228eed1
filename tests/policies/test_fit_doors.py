"""Fitting a policy from a pipeline (issue 23): ``POST /api/policies`` and ``manage.py fit_policy``
take the fit form's fields, refuse what the form refuses with the field named, and store the same
policy the page would."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from console.policies.models import SlicePolicy

pytestmark = pytest.mark.django_db


@pytest.fixture
def experiment(db):
    from tests.support.synthetic import experiment_synthesize

    return experiment_synthesize(n_requests=60, ks=(2, 4), loads="1x,2x", repeats=1)


def _post(client, body, headers):
    return client.post("/api/policies", json.dumps(body), content_type="application/json", **headers)


def test_the_api_fits_a_policy_and_answers_it_as_get_does(client, experiment, engineer, api_token_for):
    headers = api_token_for(engineer)
    response = _post(client, {"experiment": experiment.pk, "arms": ["ngram k=4"], "load": "2x"}, headers)
    assert response.status_code == 201, response.content
    body = response.json()
    policy = SlicePolicy.objects.get(pk=body["id"])
    assert policy.arms == ["ngram k=4"] and policy.load == "2x"
    assert policy.created_by == engineer
    again = client.get(f"/api/policies/{policy.pk}", **headers).json()
    assert again["rules"] == body["rules"] and again["rules_sha256"] == policy.rules_sha256


@pytest.mark.parametrize(
    "body, field",
    [
        ({"arms": ["no such arm"]}, "arms"),
        ({"load": "9x"}, "load"),
        ({"features": ["output_tokens"]}, "features"),  # known only after the request ran
        ({"metric": "vibes"}, "metric"),
        ({"experiment": 999_999}, "experiment"),
    ],
)
def test_the_api_refuses_what_the_form_refuses_and_names_the_field(client, experiment, engineer, api_token_for, body, field):
    before = SlicePolicy.objects.count()
    response = _post(client, {"experiment": experiment.pk} | body, api_token_for(engineer))
    assert response.status_code == 400, response.content
    assert field in response.json()["details"], response.json()
    assert SlicePolicy.objects.count() == before


def test_the_api_refuses_unknown_fields_and_viewers(client, experiment, engineer, viewer, api_token_for):
    assert _post(client, {"experiment": experiment.pk, "rules": []}, api_token_for(engineer)).status_code == 400
    assert _post(client, {"experiment": experiment.pk}, api_token_for(viewer)).status_code == 403
    assert not SlicePolicy.objects.exists()


def test_the_command_fits_and_prints_an_export(experiment, engineer):
    out = io.StringIO()
    call_command("fit_policy", str(experiment.pk), "--user", engineer.username, "--load", "all", "--export", "rules", stdout=out)
    policy = SlicePolicy.objects.get()
    assert json.loads(out.getvalue()) == policy.rules and policy.load == ""
    out = io.StringIO()
    call_command("fit_policy", str(experiment.pk), "--user", engineer.username, stdout=out)
    assert f"policy {SlicePolicy.objects.latest('pk').pk} on experiment {experiment.pk}" in out.getvalue()
    assert "holdout: saving per request" in out.getvalue()


def test_the_command_refuses_a_bad_level_and_a_viewer(experiment, engineer, viewer):
    with pytest.raises(CommandError, match="load"):
        call_command("fit_policy", str(experiment.pk), "--user", engineer.username, "--load", "9x")
    with pytest.raises(CommandError, match="may not fit"):
        call_command("fit_policy", str(experiment.pk), "--user", viewer.username)
    assert not SlicePolicy.objects.exists()
