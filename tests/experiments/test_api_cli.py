from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from console.experiments.models import Experiment, Run
from tests.experiments.factories import trace_make

pytestmark = pytest.mark.django_db

OPENAI_ARGS = {"base_url": "http://127.0.0.1:9/v1", "check_server": False}


@pytest.fixture(autouse=True)
def _registered(openai_register):
    openai_register("http://127.0.0.1:9/v1", name="local")


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


# -- engine configs that cannot leak worker secrets or reach unregistered addresses ------------


@pytest.mark.parametrize(
    ("engine", "args", "field"),
    [
        ("openai", {"server": "local", "api_key_env": "DATABASE_URL"}, "engine_args.api_key_env"),
        ("openai", {"server": "local", "api_key": "sk-live-abcdef123456"}, "engine_args.api_key"),
        ("openai", {"base_url": "http://127.0.0.1:5432/v1"}, "engine_args.base_url"),
        ("vllm", {"trust_remote_code": True}, "engine_args.trust_remote_code"),
        ("vllm", {"download_dir": "/etc"}, "engine_args.download_dir"),
    ],
)
def test_it_answers_a_config_that_could_leak_or_reach_anywhere_with_a_400_naming_the_field(
    client, engineer, api_token_for, engine, args, field
):
    trace = trace_make(prompts=["a"])
    body = _body(trace, engine=engine, baseline_engine_args=args)
    response = client.post(
        "/api/experiments", body, content_type="application/json", **api_token_for(engineer)
    )
    assert response.status_code == 400, response.content
    messages = response.json()["details"]["baseline"]
    assert any(field in m for m in messages), messages
    assert "sk-live" not in response.content.decode()
    assert not Experiment.objects.exists()


def test_it_accepts_a_registered_server_by_name_or_by_its_exact_url(client, engineer, api_token_for):
    trace = trace_make(prompts=["a"])
    auth = api_token_for(engineer)
    for args in ({"server": "local", "check_server": False}, {"base_url": "http://127.0.0.1:9/v1/"}):
        body = _body(trace, baseline_engine_args=args)
        response = client.post("/api/experiments", body, content_type="application/json", **auth)
        assert response.status_code == 201, response.content


def test_it_shows_a_form_error_for_a_key_in_the_config_and_stores_nothing(client, engineer):
    trace = trace_make(prompts=["a"])
    client.force_login(engineer)
    response = client.post(
        "/experiments/new/",
        {
            "name": "leak",
            "trace": trace.pk,
            "split": "all",
            "engine": "openai",
            "target_model": "m",
            "baseline_engine_args": json.dumps({"server": "local", "api_key_env": "DATABASE_URL"}),
            "candidates": json.dumps(
                [{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}]
            ),
            "load_levels": "1x",
            "sampling": "trace",
            "repeats": 1,
            "warmup": 0,
            "cost_per_hour_usd": 1,
        },
    )
    assert response.status_code == 200
    errors = response.context["form"].errors["baseline_engine_args"]
    assert any("engine_args.api_key_env is not accepted" in e for e in errors), errors
    assert not Experiment.objects.exists()


def test_it_exits_2_on_the_cli_for_an_unregistered_server(tmp_path):
    trace = trace_make(prompts=["a"])
    baseline = tmp_path / "base.yaml"
    baseline.write_text("engine: openai\ntarget_model: m\nengine_args:\n  base_url: http://10.0.0.1:80/v1\n")
    with pytest.raises(CommandError, match="engine_args.base_url .* is not a registered server") as err:
        call_command(
            "run_experiment",
            trace=trace.pk,
            baseline=str(baseline),
            candidate=['{"method": "ngram", "num_speculative_tokens": 2}'],
        )
    assert err.value.returncode == 2
    assert not Experiment.objects.exists()
