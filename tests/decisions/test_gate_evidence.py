"""The gate refuses what the comparison cannot vouch for: a candidate with no evidence that it
drafted (not measured), a config its drafts contradict, and arms measured on different machines
or versions (fail)."""

from __future__ import annotations

import pandas as pd

from console.analysis.comparison.environment import environment_check
from console.decisions import gate
from tests.decisions.factories import summary_make, summary_passing


def _gate(summary, *, proposal="enable_everywhere", policy=None):
    facts = gate.gate_facts_from_summary(
        summary_make(summary), candidate_arm="ngram", traffic_class="interactive", capacity_bytes=16 * 2**30
    )
    result = gate.gate_evaluate(facts, None, traffic_class="interactive", proposal=proposal, policy=policy)
    return result, {c["key"]: c for c in result["criteria"]}


def _row(load, **values):
    return {"arm": "ngram", "load": load, "speculative": True, "source": "per-request", "drafts": 40,
            "did_not_speculate": False, "reason": None} | values


def test_it_does_not_measure_latency_for_a_candidate_without_drafting_evidence():
    s = summary_passing()
    s["speculation"] = [_row("1x", source=None, drafts=None), _row("4x")]
    result, by_key = _gate(s)
    assert by_key["latency_benefit"]["status"] == "not_measured" and result["overall"] != "pass"
    summary = by_key["latency_benefit"]["summary"]
    assert "ngram" in summary and "1x" in summary and "4x" not in summary
    assert "--per-request-spec-decode-metrics" in summary
    policy = {
        "holdout": {"n_requests": 50, "share_on": 0.4, "policy": {"n": 50, "benefit": 0.02, "lo": 0.01, "hi": 0.03},
                    "lost_successes": 0, "regressions": 0},
        "overfitting": {"policy": False, "rules": [], "reasons": []},
    }
    result, _ = _gate(s, proposal="enable_for_slice", policy=policy)
    assert result["criteria"][0]["key"] == "policy_holdout" and result["criteria"][0]["status"] == "not_measured"


def test_it_passes_with_drafting_evidence_at_every_load():
    s = summary_passing()
    s["speculation"] = [_row("1x"), _row("4x")]
    assert _gate(s)[0]["overall"] == "pass"


def test_it_fails_a_candidate_whose_drafts_contradict_its_config():
    s = summary_passing()
    reason = "config mismatch: ngram is configured with num_speculative_tokens 4, yet a step at load 1x drafted 7"
    s["speculation"] = [_row("1x", config_mismatch=True, max_drafted_per_step=7, reason=reason), _row("4x")]
    result, by_key = _gate(s)
    assert by_key["latency_benefit"]["status"] == "fail" and by_key["latency_benefit"]["summary"] == reason
    assert result["overall"] == "fail"


def _environment(**gpu_names):
    runs = pd.DataFrame({"run_id": [1, 2, 3], "arm": ["baseline", "ngram", "other"], "load": ["1x"] * 3})
    env = {
        run_id: {"hardware": {"hostname": f"host-{run_id}", "cpu_model": "Xeon", "cpu_count": 8,
                              "gpus": [{"name": gpu_names.get(arm, "NVIDIA H100"), "memory_bytes": 80 * 2**30}]},
                 "versions": {"torch": "2.13.0", "transformers": "5.17.0"}}
        for run_id, arm in zip(runs["run_id"], runs["arm"], strict=True)
    }
    return environment_check(run_environments=env, runs=runs)


def test_it_fails_arms_measured_on_different_gpus_but_not_on_different_hosts():
    s = summary_passing()
    s["environment"] = _environment(ngram="NVIDIA A100-SXM4-40GB")
    result, by_key = _gate(s)
    assert by_key["latency_benefit"]["status"] == "fail" and result["overall"] == "fail"
    assert "gpu_names" in by_key["latency_benefit"]["summary"] and "NVIDIA A100" in by_key["latency_benefit"]["summary"]
    assert {"label": "environment check", "anchor": "environment"} in by_key["latency_benefit"]["evidence"]
    s["environment"] = _environment()  # hostnames differ, nothing else
    assert _gate(s)[0]["overall"] == "pass"
    s["environment"] = _environment(other="NVIDIA A100-SXM4-40GB")  # an arm the decision is not about
    assert _gate(s)[0]["overall"] == "pass"
