"""The rollout API's answers to bad input: a 400 naming the field, a 409 saying why the decision
cannot roll out or the state does not allow the act, and nothing stored by a refusal."""

from __future__ import annotations

import pytest
import yaml

from console.rollouts.models import Rollout
from tests.decisions.conftest import draft_make
from tests.decisions.test_api import post_json

pytestmark = pytest.mark.django_db

BODY = {
    "prometheus": "prod",
    "candidate_pool": 'pool="speculative"',
    "control_pool": 'pool="baseline"',
    "stages": [{"share": 10, "minutes": 30}, {"share": 100, "minutes": 60}],
}


@pytest.fixture(autouse=True)
def registered(settings):
    settings.SPECREVIEW_PROMETHEUS = {"prod": {"url": "http://127.0.0.1:9", "bearer_token_file": ""}}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"prometheus": "http://evil.example.org:9090"}, "prometheus"),
        ({"candidate_pool": 'pool="a"} or vector(1) or {x="'}, "candidate_pool"),
        ({"control_pool": "pool=baseline"}, "control_pool"),
        ({"stages": [{"share": 150, "minutes": 5}]}, "stages"),
        ({"stages": [{"share": 50, "minutes": 5}, {"share": 10, "minutes": 5}]}, "stages"),
    ],
)
def test_a_bad_start_is_a_400_naming_its_field(client, signed, engineer, api_token_for, change, field):
    response = post_json(client, f"/api/decisions/{signed.pk}/rollouts", BODY | change, api_token_for(engineer))
    assert response.status_code == 400, response.content
    assert field in response.json()["details"]
    assert not Rollout.objects.exists()


def test_a_schema_error_is_a_400_too(client, signed, engineer, api_token_for):
    for body in (BODY | {"alpha": 0.9}, BODY | {"stages": []}, BODY | {"extra": 1}, BODY | {"stages": "5:30"}):
        response = post_json(client, f"/api/decisions/{signed.pk}/rollouts", body, api_token_for(engineer))
        assert response.status_code == 400, body


def test_a_draft_cannot_roll_out_and_an_ended_rollout_cannot_be_paused(
    client, experiment, signed, engineer, api_token_for
):
    headers = api_token_for(engineer)
    draft = draft_make(experiment=experiment, author=engineer)
    response = post_json(client, f"/api/decisions/{draft.pk}/rollouts", BODY, headers)
    assert response.status_code == 409 and "only an approved decision" in response.json()["error"]
    started = post_json(client, f"/api/decisions/{signed.pk}/rollouts", BODY, headers)
    assert started.status_code == 201
    rollout = started.json()
    assert rollout["state"] == "running" and len(rollout["triggers"]) == len(signed.rollback_triggers)
    assert all(t["state"] in ("waiting", "not measured") for t in rollout["triggers"])
    again = post_json(client, f"/api/decisions/{signed.pk}/rollouts", BODY, headers)
    assert again.status_code == 409 and "in progress" in again.json()["error"]
    url = f"/api/rollouts/{rollout['id']}"
    assert post_json(client, f"{url}/stop", {"reason": ""}, headers).status_code == 400
    stopped = post_json(client, f"{url}/stop", {"reason": "wrong region"}, headers)
    assert stopped.status_code == 200 and stopped.json()["archive_sha256"]
    assert post_json(client, f"{url}/pause", {}, headers).status_code == 409
    listed = client.get(f"/api/decisions/{signed.pk}/rollouts", **headers).json()["rollouts"]
    assert [r["state"] for r in listed] == ["stopped"]


def test_the_exports_answer_yaml_and_refuse_a_bad_namespace(client, signed, viewer, api_token_for):
    headers = api_token_for(viewer)  # reading the triggers as YAML is a read
    url = f"/api/decisions/{signed.pk}/rollout-export"
    argo = client.get(url, {"tool": "argo"}, **headers)
    assert argo.status_code == 200
    [template] = list(yaml.safe_load_all(argo.json()["yaml"]))
    assert template["kind"] == "AnalysisTemplate" and template["spec"]["metrics"]
    flagger = client.get(url, {"tool": "flagger", "namespace": "serving", "stages": "5:10,50:10,100:10"}, **headers)
    assert flagger.status_code == 200 and "MetricTemplate" in flagger.json()["yaml"]
    for bad in ({"tool": "argo", "prometheus_address": "file:///etc/passwd"}, {"tool": "flagger", "namespace": "Not_A_NS"},
                {"tool": "flagger", "stages": "five"}, {"tool": "spinnaker"}):
        assert client.get(url, bad, **headers).status_code == 400, bad
