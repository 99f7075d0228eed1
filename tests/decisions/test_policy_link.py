"""A decision for a slice freezes the fitted policy (rules and their sha256) into its evidence."""

from __future__ import annotations

import pytest

from console.decisions.models import Decision

pytestmark = pytest.mark.django_db


def test_it_drafts_enable_for_slice_with_a_fitted_policy(engineer, engineer_client):
    from console.policies.services import policy_fit
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=90, ks=(2,), loads="1x", repeats=1)
    policy = policy_fit(experiment=experiment, created_by=engineer, min_support=5)
    arm = experiment.arms.get(is_baseline=False)
    response = engineer_client.post(
        "/decisions/new/",
        {
            "experiment": experiment.pk,
            "proposal": "enable_for_slice",
            "candidate_arm": arm.pk,
            "traffic_class": "interactive",
            "slice_policy": policy.pk,
            "title": "slice",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    decision = Decision.objects.get(title="slice")
    assert decision.policy_ref == f"/policies/{policy.pk}/"
    assert decision.policy["rules_sha256"] == policy.rules_sha256


def test_it_refuses_a_policy_fitted_on_another_experiment(engineer, engineer_client):
    from console.policies.services import policy_fit
    from tests.support.synthetic import experiment_synthesize

    one = experiment_synthesize(n_requests=60, ks=(2,), loads="1x", repeats=1, name="one")
    other = experiment_synthesize(n_requests=60, ks=(2,), loads="1x", repeats=1, name="other")
    policy = policy_fit(experiment=other, created_by=engineer, min_support=5)
    response = engineer_client.post(
        "/decisions/new/",
        {
            "experiment": one.pk,
            "proposal": "enable_for_slice",
            "traffic_class": "interactive",
            "slice_policy": policy.pk,
            "title": "wrong",
        },
    )
    assert response.status_code == 200
    assert b"another experiment" in response.content
    assert not Decision.objects.filter(title="wrong").exists()
