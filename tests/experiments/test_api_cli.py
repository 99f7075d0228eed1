from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from console.experiments.models import Experiment, Run
from tests.experiments.factories import trace_make

pytestmark = pytest.mark.django_db

OPENAI_ARGS = {"base_url": "http://127.0.0.1:9/v1", "check_server": False}


def _body(trace, **over):
    body = {
        "trace": trace.pk,
        "name": "api",
        "engine": "openai",
        "target_model": "m",
        "baseline_engine_args": OPENAI_ARGS,
        "candidates": [{"speculative_config": {"method": "ngram", "num_speculative_tokens": [2, 4]}}],
        "load_levels": "1x,2x",
        "repeats": 2,
        "start": False,
    }
    body.update(over)
    return json.dumps(body)


def test_it_defines_an_experiment_through_the_api_and_reports_its_status(client, engineer, api_token_for):
    trace = trace_make(prompts=["a", "b"])
    auth = api_token_for(engineer)
    response = client.post("/api/experiments", _body(trace), content_type="application/json", **auth)
    assert response.status_code == 201, response.content
    payload = response.json()
    assert [a["label"] for a in payload["arms"]] == ["baseline", "ngram k=2", "ngram k=4"]
    assert len(payload["runs"]) == 3 * 2 * 2 and payload["status"] == "draft"
    status = client.get(f"/api/experiments/{payload['id']}", **auth).json()
    assert status["progress"]["requests_total"] == 2 * 12
    assert all(len(a["config_hash"]) == 64 for a in status["arms"])


def test_it_returns_field_errors_and_stores_nothing_for_a_bad_experiment(client, engineer, api_token_for):
    trace = trace_make(prompts=["a"])
    bad = _body(
        trace,
        load_levels="fast",
        candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 0}}],
    )
    response = client.post(
        "/api/experiments", bad, content_type="application/json", **api_token_for(engineer)
    )
    assert response.status_code == 400
    details = response.json()["details"]
    assert "load_levels" in details and "candidates.0" in details
    assert not Experiment.objects.exists()


def test_it_refuses_experiment_definition_to_a_viewer_token(client, viewer, api_token_for):
    trace = trace_make(prompts=["a"])
    response = client.post(
        "/api/experiments", _body(trace), content_type="application/json", **api_token_for(viewer)
    )
    assert response.status_code == 403
    assert not Experiment.objects.exists()


def test_it_cancels_through_the_api(client, engineer, api_token_for):
    trace = trace_make(prompts=["a"])
    auth = api_token_for(engineer)
    experiment_id = client.post(
        "/api/experiments", _body(trace), content_type="application/json", **auth
    ).json()["id"]
    response = client.post(f"/api/experiments/{experiment_id}/cancel", **auth)
    assert response.status_code == 200
    assert set(Run.objects.filter(experiment_id=experiment_id).values_list("status", flat=True)) == {
        "cancelled"
    }


def test_it_reports_bad_cli_configs_clearly(tmp_path):
    trace = trace_make(prompts=["a"])
    with pytest.raises(CommandError, match="--baseline"):
        call_command("run_experiment", trace=trace.pk, baseline="{not json", candidate=[])
    with pytest.raises(CommandError, match="no trace with id 999"):
        call_command("run_experiment", trace=999, baseline="{}", candidate=[])
    baseline = tmp_path / "base.yaml"
    baseline.write_text(
        "engine: openai\ntarget_model: m\nengine_args:\n  base_url: http://127.0.0.1:9/v1\n"
        "  check_server: false\n"
    )
    with pytest.raises(CommandError, match="num_speculative_tokens"):
        call_command(
            "run_experiment",
            trace=trace.pk,
            baseline=str(baseline),
            candidate=['{"method": "ngram", "num_speculative_tokens": -1}'],
        )
    assert not Experiment.objects.exists()
