"""The pure policy functions against hand-computed cases and a few properties."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.policies import features as policy_features
from console.policies import fitting
from console.policies import pairs as policy_pairs
from console.policies import router as policy_router
from tests.policies.builders import ARM_CONFIGS, features_frame, slice_requests, units_frame

CODE_GAINS = [0.008, 0.009, 0.010, 0.011, 0.012, 0.010, 0.009, 0.011, 0.010, 0.010, 0.012, 0.008]
CHAT_LOSSES = [-0.002, -0.004, -0.006, -0.003, -0.005, -0.004, -0.004, -0.003, -0.005, -0.004, -0.006, -0.002]


def _data(*parts: tuple[list, list]) -> tuple[pd.DataFrame, pd.DataFrame]:
    feats, units = [], []
    for f, u in parts:
        feats += f
        units += u
    return units_frame(units), features_frame(feats)


def _fit(units, features, **params):
    names = params.pop("feature_names", list(policy_features.DEFAULT_FEATURES))
    return fitting.policy_fit(
        units, features, feature_names=names, arm_configs=ARM_CONFIGS, params=fitting.FitParams(**params)
    )


@pytest.mark.parametrize(
    "name", ["output_bucket", "num_output_tokens", "acceptance_rate", "tpot_s", "output_text"]
)
def test_it_refuses_a_feature_known_only_after_execution(name):
    with pytest.raises(policy_features.FeatureError, match=rf"'{name}'.*known only after execution.*hindsight"):
        policy_features.features_validate(["task", name])


def test_it_refuses_hindsight_in_the_fit_itself():
    units, features = _data(slice_requests("c", CODE_GAINS, task="code"))
    with pytest.raises(policy_features.FeatureError, match="output_tokens"):
        _fit(units, features, feature_names=["task", "output_tokens"])


def test_it_refuses_a_feature_not_on_the_allowlist():
    with pytest.raises(policy_features.FeatureError, match=r"'prompt'.*not on the allowlist"):
        policy_features.features_validate(["prompt"])
    with pytest.raises(policy_features.FeatureError, match="at least one"):
        policy_features.features_validate([])


def test_it_returns_features_in_allowlist_order():
    assert policy_features.features_validate(["has_tools", "task"]) == ["task", "has_tools"]


def _requests(**overrides) -> pd.DataFrame:
    row = {
        "request_id": "r1",
        "split": "train",
        "task": "code",
        "traffic_class": "batch",
        "prompt_tokens": 300,
        "max_tokens": 64,
        "response_format": {"type": "json_object"},
        "tools": [],
        "num_output_tokens": 12,
        "tpot_s": 0.04,
        "accepted": [1, 2],
        "output_text": "{}",
    }
    return pd.DataFrame([row | overrides])


def test_it_derives_buckets_and_flags_from_the_trace_inputs():
    features = policy_features.request_features(
        pd.concat(
            [
                _requests(),
                _requests(
                    request_id="r2",
                    prompt_tokens=100,
                    max_tokens=50,
                    response_format=None,
                    tools=[{"name": "f"}],
                ),
            ]
        ),
        model="qwen",
    )
    assert features.loc["r1"].to_dict() == {
        "split": "train",
        "task": "code",
        "traffic_class": "batch",
        "prompt_tokens_bucket": "256-1024",
        "max_tokens_bucket": "64-256",
        "has_schema": True,
        "has_tools": False,
        "model": "qwen",
    }
    assert features.loc["r2", "prompt_tokens_bucket"] == "0-256"
    assert features.loc["r2", "max_tokens_bucket"] == "0-64"
    assert not features.loc["r2", "has_schema"] and features.loc["r2", "has_tools"]


@settings(max_examples=30, deadline=None)
@given(
    outputs=st.lists(st.integers(0, 4000), min_size=3, max_size=3),
    latencies=st.lists(st.floats(0, 10), min_size=3, max_size=3),
)
def test_it_ignores_everything_known_after_execution_when_building_features(outputs, latencies):
    frame = pd.concat([_requests(request_id=f"r{i}", prompt_tokens=100 * i) for i in range(3)])
    before = policy_features.request_features(frame, model="m")
    changed = frame.assign(num_output_tokens=outputs, tpot_s=latencies, output_text=[str(o) for o in outputs])
    after = policy_features.request_features(changed, model="m")
    pd.testing.assert_frame_equal(before, after)
    assert set(after.columns) == {"split", *policy_features.ALLOWED_FEATURES}


def _derived(rows: list[dict]) -> pd.DataFrame:
    base = {
        "load": "1x",
        "completed": True,
        "met_deadline": True,
        "output_valid": True,
        "json_valid": None,
        "schema_valid": None,
        "tool_valid": None,
    }
    return pd.DataFrame([base | r for r in rows])


def test_it_pairs_each_candidate_row_with_the_baseline_on_the_same_request_and_repeat():
    derived = _derived(
        [
            {"arm": "base", "request_id": "a", "repeat": 0, "tpot_s": 0.050},
            {"arm": "base", "request_id": "a", "repeat": 1, "tpot_s": 0.060},
            {"arm": "k2", "request_id": "a", "repeat": 0, "tpot_s": 0.030},
            {"arm": "k2", "request_id": "a", "repeat": 1, "tpot_s": 0.050},
            {"arm": "base", "request_id": "b", "repeat": 0, "tpot_s": 0.050, "json_valid": True},
            {
                "arm": "k2",
                "request_id": "b",
                "repeat": 0,
                "tpot_s": 0.040,
                "json_valid": False,
                "output_valid": False,
            },
        ]
    )
    pairs = policy_pairs.pairs_build(derived, baseline_arm="base", metric="tpot_s").sort_values(
        ["request_id", "repeat"]
    )
    assert pairs["benefit"].tolist() == pytest.approx([0.020, 0.010, 0.010])
    assert pairs["regression"].tolist() == [False, False, True]
    units = policy_pairs.units_build(pairs).set_index("request_id")
    assert units.loc["a", "benefit"] == pytest.approx(0.015)
    assert units.loc["a", "n_pairs"] == 2
    assert units.loc["b", "regression"]
    assert units.loc["b", "success_delta"] == -1.0  # invalid output: not a success


def test_it_counts_a_missed_deadline_against_the_candidate():
    derived = _derived(
        [
            {"arm": "base", "request_id": "a", "repeat": 0, "tpot_s": 0.05},
            {"arm": "k2", "request_id": "a", "repeat": 0, "tpot_s": 0.04, "met_deadline": False},
        ]
    )
    units = policy_pairs.units_build(policy_pairs.pairs_build(derived, baseline_arm="base", metric="tpot_s"))
    assert units["success_delta"].tolist() == [-1.0]


def test_it_computes_the_t_interval_by_hand():
    point, lo, hi = policy_pairs.benefit_interval(np.array([1.0, 2.0, 3.0, np.nan]), stat="mean", ci=0.95)
    half = 4.302652729749464 / math.sqrt(3)  # t(0.975, 2 df) x sd 1 / sqrt(3)
    assert (point, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert math.isnan(policy_pairs.benefit_interval(np.array([1.0]), stat="mean")[1])


def test_it_computes_the_median_interval_from_order_statistics_by_hand():
    # n = 20 at 95 %: the sign-test table gives (x_(6), x_(15)).
    assert policy_pairs.benefit_interval(np.arange(1.0, 21.0), stat="p50") == (10.5, 6.0, 15.0)
    # n = 6: (x_(1), x_(6)), coverage 1 - 2/64; n = 5 is too few for a 95 % interval.
    assert policy_pairs.benefit_interval(np.array([3.0, 1, 2, 6, 5, 4]), stat="p50") == (3.5, 1.0, 6.0)
    point, lo, hi = policy_pairs.benefit_interval(np.arange(5.0), stat="p50")
    assert point == 2.0 and math.isnan(lo) and math.isnan(hi)


def test_it_enables_only_the_slice_whose_train_interval_is_above_zero():
    units, features = _data(
        slice_requests("c", CODE_GAINS, task="code"), slice_requests("h", CHAT_LOSSES, task="chat")
    )
    fitted = _fit(units, features)
    assert [(r["when"], r["arm"]) for r in fitted["rules"]] == [
        ({"model": "m", "task": "code"}, "k2"),
        ({}, None),
    ]
    assert fitted["rules"][0]["speculative_config"] == ARM_CONFIGS["k2"]
    assert fitted["rules"][-1]["speculative_config"] is None
    assert fitted["rules"][0]["train"]["n"] == 12
    assert fitted["rules"][0]["train"]["benefit"] == pytest.approx(np.mean(CODE_GAINS))


def test_it_never_enables_a_slice_with_a_quality_regression():
    units, features = _data(slice_requests("c", CODE_GAINS, task="code"))
    units.loc[3, "regression"] = True
    assert [r["arm"] for r in _fit(units, features)["rules"]] == [None]
    why = {r["why_not"] for r in _fit(units, features)["candidates"]}
    assert "1 quality regression(s)" in why


def test_it_never_enables_a_slice_that_loses_successful_requests():
    units, features = _data(slice_requests("c", CODE_GAINS, task="code"))
    units.loc[0, "success_delta"] = -1.0
    assert [r["arm"] for r in _fit(units, features)["rules"]] == [None]
    assert [r["arm"] for r in _fit(units, features, max_success_loss=0.1)["rules"]] == ["k2", None]


def test_it_needs_minimum_support():
    units, features = _data(slice_requests("c", CODE_GAINS[:9], task="code"))
    assert [r["arm"] for r in _fit(units, features)["rules"]] == [None]
    assert [r["arm"] for r in _fit(units, features, min_support=9)["rules"]] == ["k2", None]


def test_it_chooses_the_draft_length_per_slice():
    k4_code = [g * 2.5 for g in CODE_GAINS]
    chat_gain = [0.01 + 0.001 * (i % 3) for i in range(12)]
    units, features = _data(
        slice_requests("c", CODE_GAINS, task="code"),
        ([], slice_requests("c", k4_code, arm="k4", task="code")[1]),
        slice_requests("h", chat_gain, task="chat"),
        ([], slice_requests("h", [-0.01] * 12, arm="k4", task="chat")[1]),
    )
    rules = _fit(units, features)["rules"]
    route = policy_router.policy_route(rules, features)
    assert set(route.loc[route.index.str.startswith("c"), "arm"]) == {"k4"}
    assert set(route.loc[route.index.str.startswith("h"), "arm"]) == {"k2"}


def test_it_routes_by_the_first_matching_rule():
    features = features_frame(
        [
            {"request_id": "a", "task": "code"},
            {"request_id": "b", "task": "code", "traffic_class": "batch"},
            {"request_id": "c"},
        ]
    )
    rules = [
        {"when": {"task": "code", "traffic_class": "batch"}, "arm": "k2"},
        {"when": {"task": "code"}, "arm": "k4"},
        {"when": {}, "arm": None},
    ]
    route = policy_router.policy_route(rules, features)
    assert route["arm"].tolist() == ["k4", "k2", None]
    assert route["rule"].tolist() == [1, 0, 2]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(holdout=st.lists(st.floats(-1.0, 1.0), min_size=15, max_size=15))
def test_it_never_reads_the_holdout_split_when_fitting(holdout):
    train = slice_requests("c", CODE_GAINS, task="code"), slice_requests("h", CHAT_LOSSES, task="chat")
    feats, units = slice_requests("x", holdout, task="json", split="holdout")
    base_units, base_features = _data(*train)
    with_holdout_units, with_holdout_features = _data(*train, (feats, units))
    assert (
        _fit(with_holdout_units, with_holdout_features)["rules"] == _fit(base_units, base_features)["rules"]
    )


def test_it_scores_the_holdout_split_by_hand():
    feats, units = [], []
    for prefix, gains, task in (("c", [0.001, 0.002, 0.003], "code"), ("h", [0.005, 0.005], "chat")):
        f, u = slice_requests(prefix, gains, task=task, split="holdout")
        feats += f
        units += u
    f, u = slice_requests("t", [9.0] * 4, task="code")  # train rows: never part of the holdout score
    units_df, features_df = units_frame(units + u), features_frame(feats + f)
    rules = [{"when": {"task": "code"}, "arm": "k2"}, {"when": {}, "arm": None}]
    score = fitting.policy_score(rules, units_df, features_df, split="holdout")
    assert score["n_requests"] == 5 and score["n_on"] == 3
    assert score["share_on"] == pytest.approx(0.6)
    assert score["policy"]["benefit"] == pytest.approx((0.001 + 0.002 + 0.003) / 5)
    assert score["all_on"]["k2"]["benefit"] == pytest.approx(0.016 / 5)
    assert score["policy_vs_all_on"]["k2"]["benefit"] == pytest.approx(-0.01 / 5)
    assert score["all_off"]["benefit"] == 0.0
    assert score["rules"][0]["n_requests"] == 3
    assert score["rules"][0]["benefit"] == pytest.approx(0.002)
    assert score["rules"][1]["n_requests"] == 2


def test_it_scores_train_rules_as_the_fit_measured_them():
    units, features = _data(
        slice_requests("c", CODE_GAINS, task="code"), slice_requests("h", CHAT_LOSSES, task="chat")
    )
    fitted = _fit(units, features)
    score = fitting.policy_score(fitted["rules"], units, features, split="train")
    for rule, scored in zip(fitted["rules"][:-1], score["rules"], strict=False):
        assert scored["benefit"] == pytest.approx(rule["train"]["benefit"])
        assert scored["lo"] == pytest.approx(rule["train"]["lo"])


def _scores(holdout_code: list[float]):
    units, features = _data(
        slice_requests("c", CODE_GAINS, task="code"),
        slice_requests("h", CHAT_LOSSES, task="chat"),
        slice_requests("x", holdout_code, task="code", split="holdout"),
    )
    rules = _fit(units, features)["rules"]
    train = fitting.policy_score(rules, units, features, split="train")
    holdout = fitting.policy_score(rules, units, features, split="holdout")
    return fitting.overfitting_flags(train, holdout)


def test_it_flags_overfitting_when_the_holdout_interval_includes_zero():
    flags = _scores([0.01, -0.01, 0.002, -0.003, 0.0, 0.001])
    assert flags["policy"] and flags["rules"] == [0]
    assert "holdout interval includes zero" in flags["reasons"][-1]


def test_it_does_not_flag_a_policy_that_holds_on_holdout():
    flags = _scores(CODE_GAINS[:6])
    assert flags == {"policy": False, "rules": [], "reasons": []}


@settings(max_examples=25, deadline=None)
@given(gains=st.lists(st.floats(-0.05, 0.05), min_size=4, max_size=12))
def test_it_gives_all_on_under_an_everywhere_rule_and_zero_under_all_off(gains):
    feats, units = slice_requests("r", gains, split="holdout")
    units_df, features_df = units_frame(units), features_frame(feats)
    everywhere = fitting.policy_score([{"when": {}, "arm": "k2"}], units_df, features_df, split="holdout")
    assert everywhere["policy"]["benefit"] == pytest.approx(everywhere["all_on"]["k2"]["benefit"])
    assert everywhere["share_on"] == 1.0
    off = fitting.policy_score([{"when": {}, "arm": None}], units_df, features_df, split="holdout")
    assert off["policy"]["benefit"] == 0.0 and off["share_on"] == 0.0


def test_it_hashes_the_canonical_document():
    rules = [
        {"when": {"task": "code", "model": "m"}, "arm": "k2", "speculative_config": ARM_CONFIGS["k2"]},
        {"when": {}, "arm": None, "speculative_config": None},
    ]
    doc = policy_router.rules_document(rules)
    reordered = policy_router.rules_document([{**rules[0], "when": {"model": "m", "task": "code"}}, rules[1]])
    assert policy_router.document_sha256(doc) == policy_router.document_sha256(reordered)
    changed = policy_router.rules_document([{**rules[0], "when": {"task": "chat"}}, rules[1]])
    assert policy_router.document_sha256(doc) != policy_router.document_sha256(changed)
    assert doc["rules"][-1] == {"when": {}, "arm": None, "speculative_config": None}
    assert doc["buckets"]["prompt_tokens_bucket"]["edges"][:2] == [0, 256]


def test_it_carves_out_a_significantly_worse_sub_slice():
    units, features = _data(
        slice_requests("c", [g * 2 for g in CODE_GAINS], task="code"),
        slice_requests("h", CODE_GAINS, task="chat"),
        slice_requests("j", CHAT_LOSSES, task="json"),
    )
    rules = _fit(units, features)["rules"]
    assert [(r["when"], r["arm"]) for r in rules] == [
        ({"model": "m", "task": "json"}, None),
        ({"model": "m"}, "k2"),
        ({}, None),
    ]
    assert rules[0]["off_instead_of"] == "k2" and rules[0]["train"]["hi"] < 0
    assert rules[1]["train"]["n"] == 24  # the enabled rule's numbers exclude the carve-out
    route = policy_router.policy_route(rules, features)
    assert route.loc[route.index.str.startswith("j"), "arm"].isna().all()
    assert (route.loc[~route.index.str.startswith("j"), "arm"] == "k2").all()
    score = fitting.policy_score(rules, units, features, split="train")
    assert score["rules"][0]["foregone"]["benefit"] == pytest.approx(np.mean(CHAT_LOSSES))


def test_it_flags_a_carve_out_that_does_not_hold_on_holdout():
    units, features = _data(
        slice_requests("c", [g * 2 for g in CODE_GAINS], task="code"),
        slice_requests("h", CODE_GAINS, task="chat"),
        slice_requests("j", CHAT_LOSSES, task="json"),
        slice_requests("xc", CODE_GAINS[:6], task="code", split="holdout"),
        slice_requests("xj", CODE_GAINS[:6], task="json", split="holdout"),  # json is fine on holdout
    )
    rules = _fit(units, features)["rules"]
    train = fitting.policy_score(rules, units, features, split="train")
    holdout = fitting.policy_score(rules, units, features, split="holdout")
    flags = fitting.overfitting_flags(train, holdout)
    assert flags["rules"] == [0] and not flags["policy"]
    assert "off rule 1 (model = m and task = json)" in flags["reasons"][0]
