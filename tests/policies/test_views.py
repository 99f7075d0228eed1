"""Policy pages and API: fit form, detail, list, rules export, roles."""

from __future__ import annotations

import json
import re

import pytest

from console.policies import router as policy_router
from console.policies.models import SlicePolicy
from console.policies.services import policy_fit
from tests.support.synthetic import experiment_synthesize

pytestmark = pytest.mark.django_db


@pytest.fixture
def experiment():
    return experiment_synthesize(n_requests=60, ks=(2, 4), loads="1x", repeats=2, seed=2, name="views")


@pytest.fixture
def policy(experiment, engineer):
    return policy_fit(experiment=experiment, created_by=engineer)


def test_it_shows_the_fit_form_from_the_comparison_link(engineer_client, experiment):
    response = engineer_client.get(f"/policies/new/?experiment={experiment.pk}")
    assert response.status_code == 200
    body = response.content.decode()
    for arm in experiment.arms.filter(is_baseline=False):
        assert arm.label in body
    assert "prompt_tokens_bucket" in body
    assert "output_bucket" not in body  # post-execution features are not even offered


def test_it_fits_a_policy_from_the_form(engineer_client, experiment):
    arms = [a.label for a in experiment.arms.filter(is_baseline=False)]
    response = engineer_client.post(
        "/policies/new/",
        {
            "experiment": experiment.pk,
            "arms": arms,
            "load": "1x",
            "metric": "tpot_s",
            "features": ["task", "traffic_class", "model"],
            "min_support": 10,
            "ci": 0.95,
        },
    )
    policy = SlicePolicy.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/policies/{policy.pk}/"
    assert policy.features == ["task", "traffic_class", "model"] and policy.load == "1x"


def test_it_shows_why_a_fit_was_refused(engineer_client, experiment):
    experiment.trace.requests.update(split="train")
    response = engineer_client.post(
        "/policies/new/",
        {
            "experiment": experiment.pk,
            "arms": [experiment.arms.exclude(is_baseline=True).first().label],
            "load": "__all__",
            "metric": "e2e_s",
            "features": ["task"],
            "min_support": 10,
            "ci": 0.95,
        },
    )
    assert response.status_code == 200
    assert "holdout" in response.content.decode()
    assert not SlicePolicy.objects.exists()


def test_it_refuses_the_fit_form_to_a_viewer(viewer_client, experiment):
    assert viewer_client.get(f"/policies/new/?experiment={experiment.pk}").status_code == 403
    assert viewer_client.post("/policies/new/", {"experiment": experiment.pk}).status_code == 403
    assert not SlicePolicy.objects.exists()


def test_it_shows_rules_scores_and_the_rules_json(viewer_client, policy):
    response = viewer_client.get(f"/policies/{policy.pk}/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Rules (first match wins)" in body
    assert "share of traffic on" in body
    assert policy.rules_sha256 in body
    assert 'id="benefit-per-rule"' in body and re.search(r"plotly/plotly\.min\.[0-9a-f]{12}\.js", body)
    assert "No overfitting flag" in body


def test_it_shows_the_overfitting_flag(viewer_client, policy):
    policy.overfitting = {
        "policy": True,
        "rules": [0],
        "reasons": ["rule 1 (task = code): holdout interval includes zero"],
    }
    policy.save()
    body = viewer_client.get(f"/policies/{policy.pk}/").content.decode()
    assert "Overfitting flagged" in body and "holdout interval includes zero" in body


def test_it_downloads_the_rules_a_router_loads(viewer_client, policy):
    response = viewer_client.get(f"/policies/{policy.pk}/rules.json")
    assert response.status_code == 200
    document = json.loads(response.content)
    assert policy_router.document_sha256(document) == policy.rules_sha256 == response["X-Content-SHA256"]


def test_it_lists_policies_per_experiment(viewer_client, policy, experiment):
    other = experiment_synthesize(n_requests=30, repeats=1, loads="1x", seed=9, name="other")
    body = viewer_client.get(f"/policies/?experiment={experiment.pk}").content.decode()
    assert f"/policies/{policy.pk}/" in body
    assert "No policies yet" in viewer_client.get(f"/policies/?experiment={other.pk}").content.decode()


def test_it_serves_rules_and_scores_over_the_api(client, policy, viewer, api_token_for):
    response = client.get(f"/api/policies/{policy.pk}", **api_token_for(viewer))
    assert response.status_code == 200
    data = response.json()
    assert data["document"] == policy.rules and data["rules_sha256"] == policy.rules_sha256
    assert data["rules"] == policy.rules["rules"] and data["rules"][-1]["speculative_config"] is None
    assert data["holdout_scores"]["n_requests"] == policy.holdout_scores["n_requests"]
    assert data["train_scores"]["share_on"] == policy.train_scores["share_on"]
    listed = client.get(f"/api/policies?experiment={policy.experiment_id}", **api_token_for(viewer)).json()
    assert [p["id"] for p in listed] == [policy.pk]
    assert client.get("/api/policies/999999", **api_token_for(viewer)).status_code == 404


def test_it_shows_an_off_carve_out_with_what_it_forgoes(viewer_client, policy):
    arm = policy.arms[0]
    policy.rules = {
        **policy.rules,
        "rules": [{"when": {"task": "json"}, "arm": None, "speculative_config": None}]
        + policy.rules["rules"],
    }
    for key in ("train_scores", "holdout_scores"):
        scores = getattr(policy, key)
        off = {
            "rule": 0,
            "when": {"task": "json"},
            "arm": None,
            "n_requests": 12,
            "n": 12,
            "benefit": 0.0,
            "lo": 0.0,
            "hi": 0.0,
            "off_instead_of": arm,
            "foregone": {"n": 12, "benefit": -0.004, "lo": -0.006, "hi": -0.002},
        }
        scores["rules"] = [off] + scores["rules"]
    policy.save()
    body = viewer_client.get(f"/policies/{policy.pk}/").content.decode()
    assert f"off; {arm} there" in body and "-4.00 ms [-6.00, -2.00] (n=12)" in body


def test_it_shows_the_holdout_per_load_level_for_pooled_loads(viewer_client, engineer):
    experiment = experiment_synthesize(n_requests=45, ks=(2,), loads="1x,2x", repeats=1, seed=5, name="loads")
    pooled = policy_fit(experiment=experiment, created_by=engineer)
    body = viewer_client.get(f"/policies/{pooled.pk}/").content.decode()
    assert "Holdout per load level" in body and "<td>2x</td>" in body


def test_it_lists_the_slices_considered_with_why_not(viewer_client, policy):
    body = viewer_client.get(f"/policies/{policy.pk}/").content.decode()
    assert "Slices the fit considered" in body
    assert "task = json" in body and "all traffic" in body


def test_it_says_why_there_is_no_saving_chart_and_shows_no_flag_as_good_news(viewer_client, policy):
    """A policy that turns nothing on has no saving to chart: the page says so instead of an empty
    axis; "no overfitting flag" reads as the good news it is, not as a warning (issue 22, point 6)."""
    body = viewer_client.get(f"/policies/{policy.pk}/").content.decode()
    assert '<p class="notice ok" id="overfitting">No overfitting flag' in body
    policy.rules = {**policy.rules, "rules": [dict(rule, arm=None) for rule in policy.rules["rules"]]}
    policy.save()
    body = viewer_client.get(f"/policies/{policy.pk}/").content.decode()
    chart = body[body.index('id="benefit-chart"') :]
    chart = chart[: chart.index("</section>")]
    assert 'id="benefit-per-rule"' not in chart and "No rule turns speculation on" in chart
