"""Fitting a policy from a stored (synthetic) experiment: train only, holdout scores, refusals."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from console.policies import features as policy_features
from console.policies import router as policy_router
from console.policies.models import SlicePolicy
from console.policies.selectors import PolicyInputError, policy_export, policy_inputs
from console.policies.services import policy_fit
from console.results.models import RequestResult
from tests.support.synthetic import experiment_synthesize

pytestmark = pytest.mark.django_db


@pytest.fixture
def experiment():
    return experiment_synthesize(n_requests=90, ks=(2, 4), loads="1x,2x", repeats=2, seed=4, name="policy")


def _candidates(experiment) -> list[str]:
    return [a.label for a in experiment.arms.filter(is_baseline=False).order_by("position")]


def test_it_fits_on_train_and_scores_on_holdout(experiment, engineer):
    policy = policy_fit(experiment=experiment, load="1x", created_by=engineer)
    assert policy.created_by == engineer
    assert policy.arms == sorted(_candidates(experiment))
    assert policy.rules["schema"] == policy_router.SCHEMA
    assert policy.rules["rules"][-1] == {"when": {}, "arm": None, "speculative_config": None}
    assert policy.rules_sha256 == policy_router.document_sha256(policy.rules)
    holdout = experiment.trace.requests.filter(split="holdout").count()
    assert policy.holdout_scores["n_requests"] == holdout == 30
    assert policy.train_scores["n_requests"] == 60
    assert set(policy.source_runs) == set(
        experiment.runs.filter(load_label="1x").values_list("pk", flat=True)
    )
    # The synthetic candidates are faster on every task: something is turned on, with a real config.
    on = [r for r in policy.rules["rules"] if r["arm"]]
    assert on and all(r["speculative_config"]["method"] == "ngram" for r in on)
    assert all(r["when"]["model"] == "synthetic" for r in on)
    assert 0 < policy.holdout_scores["share_on"] <= 1


def test_it_exports_what_a_decision_freezes(experiment, engineer):
    policy = policy_fit(experiment=experiment, load="2x", created_by=engineer)
    exported = policy_export(policy=policy)
    assert exported["rules_sha256"] == policy_router.document_sha256(exported["document"])
    assert exported["url"] == f"/policies/{policy.pk}/"
    assert exported["load"] == "2x"
    assert set(exported["holdout"]) == {"n_requests", "share_on", "policy", "lost_successes", "regressions"}


def test_it_refuses_a_feature_known_after_execution_before_storing_anything(experiment, engineer):
    with pytest.raises(policy_features.FeatureError, match="known only after execution"):
        policy_fit(experiment=experiment, features=["task", "output_bucket"], created_by=engineer)
    assert not SlicePolicy.objects.exists()


def test_it_refuses_a_viewer(experiment, viewer):
    with pytest.raises(PermissionDenied):
        policy_fit(experiment=experiment, created_by=viewer)


def test_it_refuses_without_holdout_results(experiment, engineer):
    experiment.trace.requests.update(split="train")
    with pytest.raises(PolicyInputError, match="holdout"):
        policy_fit(experiment=experiment, created_by=engineer)


def test_it_refuses_an_unknown_arm_or_load(experiment, engineer):
    with pytest.raises(PolicyInputError, match="not a candidate arm"):
        policy_fit(experiment=experiment, arms=["nope"], created_by=engineer)
    with pytest.raises(PolicyInputError, match="unknown load level"):
        policy_fit(experiment=experiment, load="9x", created_by=engineer)


def test_it_joins_the_trace_split_by_request_id(experiment):
    inputs = policy_inputs(experiment=experiment, arms=None, load="1x")
    expected = dict(experiment.trace.requests.values_list("request_id", "split"))
    assert inputs.features["split"].to_dict() == expected
    assert set(inputs.derived["split"]) == {"train", "holdout"}


def test_it_keeps_speculation_off_where_the_candidate_breaks_json(experiment, engineer):
    json_requests = experiment.trace.requests.filter(task="json")
    json_requests.update(response_format={"type": "json_object"})
    # As the worker stores them: the baseline's JSON is valid, the candidates' is not.
    results = RequestResult.objects.filter(trace_request__task="json")
    results.filter(run__arm__is_baseline=True).update(
        output_text='{"ok": true}', json_valid=True, schema_valid=True
    )
    results.filter(run__arm__is_baseline=False).update(json_valid=False, schema_valid=False)
    policy = policy_fit(experiment=experiment, load="1x", created_by=engineer)
    inputs = policy_inputs(experiment=experiment, arms=None, load="1x")
    route = policy_router.policy_route(policy.rules["rules"], inputs.features)
    json_ids = set(json_requests.values_list("request_id", flat=True))
    assert route.loc[sorted(json_ids), "arm"].isna().all()
    assert route["arm"].notna().any()  # the other tasks still benefit
    assert policy.holdout_scores["regressions"] == 0


def test_it_scores_each_load_level_when_loads_are_pooled(experiment, engineer):
    pooled = policy_fit(experiment=experiment, created_by=engineer)
    assert list(pooled.holdout_scores["by_load"]) == ["1x", "2x"]
    for level in ("1x", "2x"):
        alone = pooled.holdout_scores["by_load"][level]
        assert alone["n_requests"] == 30
        assert alone["share_on"] == pooled.holdout_scores["share_on"]  # same rules, same requests
    assert "by_load" not in policy_fit(experiment=experiment, load="1x", created_by=engineer).holdout_scores
