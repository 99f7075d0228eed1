"""The release gate on synthetic comparison summaries: each criterion flips to fail when its
condition is broken, and reads "not measured" when its evidence is missing."""

from __future__ import annotations

import copy

import pytest

from console.decisions import gate
from tests.decisions.factories import summary_passing


def evaluate(summary, settings=None, traffic_class="interactive"):
    facts = gate.gate_facts_from_summary(summary, candidate_arm="ngram", traffic_class=traffic_class)
    result = gate.gate_evaluate(facts, settings, traffic_class=traffic_class)
    return result, {c["key"]: c for c in result["criteria"]}


def edit_rows(summary, *, metric, stat=None, load=None, traffic_class="any", **values):
    hit = 0
    for r in summary["comparisons"]:
        if r["metric"] != metric or (stat and r["stat"] != stat) or (load and r["load"] != load):
            continue
        if traffic_class != "any" and r["traffic_class"] != traffic_class:
            continue
        r.update(values)
        hit += 1
    assert hit, "the edit matched no row"


def test_it_passes_every_criterion_on_a_clear_win():
    result, by_key = evaluate(summary_passing())
    assert {k: c["status"] for k, c in by_key.items()} == {k: "pass" for k, _ in gate.CRITERIA}
    assert result["overall"] == "pass"
    assert gate.gate_failing(result) == []


def test_it_fails_the_improvement_when_its_interval_reaches_zero():
    s = summary_passing()
    edit_rows(s, metric="successes_per_accelerator_hour", ratio_lo=0.97, delta_lo=-3.0)
    result, by_key = evaluate(s)
    assert by_key["task_improvement"]["status"] == "fail"
    assert "not above zero" in by_key["task_improvement"]["summary"]
    assert result["overall"] == "fail"
    assert gate.gate_failing(result) == ["task_improvement"]


def test_it_weights_the_improvement_by_the_workload_mix():
    s = summary_passing()
    edit_rows(s, metric="successes_per_accelerator_hour", load="4x", ratio=0.8, ratio_lo=0.7, ratio_hi=0.9)
    _, equal = evaluate(s)
    assert equal["task_improvement"]["status"] == "fail"  # (0.1 - 0.3) / 2 < 0
    _, weighted = evaluate(s, {"load_weights": {"1x": 9, "4x": 1}})
    assert weighted["task_improvement"]["status"] == "pass"  # 0.9 * 0.1 - 0.1 * 0.3 > 0


def test_it_falls_back_to_goodput_when_successes_per_hour_are_absent():
    s = summary_passing()
    s["comparisons"] = [r for r in s["comparisons"] if r["metric"] != "successes_per_accelerator_hour"]
    _, by_key = evaluate(s)
    assert by_key["task_improvement"]["status"] == "pass"
    assert "goodput_rps" in by_key["task_improvement"]["summary"]
    edit_rows(s, metric="goodput_rps", ratio_lo=0.9)
    _, by_key = evaluate(s)
    assert by_key["task_improvement"]["status"] == "fail"


def test_it_fails_the_latency_benefit_inside_the_noise_floor():
    s = summary_passing()
    for metric, floor in (("tpot_s", 0.05), ("e2e_s", 2.0)):
        edit_rows(s, metric=metric, stat="p95", traffic_class="interactive", load="4x", noise_floor=floor)
    _, by_key = evaluate(s)
    c = by_key["latency_benefit"]
    assert c["status"] == "fail"
    assert "4x" in c["summary"] and "1x" not in c["summary"]


def test_it_fails_the_latency_benefit_when_the_interval_contains_zero():
    s = summary_passing()
    for metric in ("tpot_s", "e2e_s"):
        edit_rows(s, metric=metric, stat="p95", traffic_class="interactive", delta_hi=0.001)
    _, by_key = evaluate(s)
    assert by_key["latency_benefit"]["status"] == "fail"


def test_it_judges_latency_on_the_promised_class_only():
    s = summary_passing()
    _, by_key = evaluate(s, traffic_class="batch")
    assert by_key["latency_benefit"]["status"] == "not_measured"
    for r in [r for r in s["comparisons"] if r["traffic_class"] == "interactive"]:
        s["comparisons"].append(dict(r, traffic_class="batch", delta_lo=-0.01, delta_hi=0.02))
    _, by_key = evaluate(s, traffic_class="batch")
    assert by_key["latency_benefit"]["status"] == "fail"
    _, by_key = evaluate(s, traffic_class="interactive")
    assert by_key["latency_benefit"]["status"] == "pass"


@pytest.mark.parametrize(
    "task,check", [("json", "schema_valid"), ("tool_call", "tool_valid"), ("json", "json_valid")]
)
def test_it_fails_quality_on_one_regression_in_a_critical_slice(task, check):
    s = summary_passing()
    s["quality"]["regressions"] = [
        {"arm": "ngram", "load": "1x", "task": task, "check": check, "request_id": "r1"}
    ]
    _, by_key = evaluate(s)
    assert by_key["quality"]["status"] == "fail"
    assert f"{task} {check} 1/20" in by_key["quality"]["summary"]


def test_it_allows_regressions_up_to_a_slice_threshold():
    s = summary_passing()
    s["quality"]["regressions"] = [{"arm": "ngram", "task": "chat", "check": "exact_match"}] * 1
    _, by_key = evaluate(s, {"quality_thresholds": {"json": 0.0, "tool_call": 0.0, "*": 0.05}})
    assert by_key["quality"]["status"] == "pass"  # 1 / 20 = 5% <= 5%
    s["quality"]["regressions"] *= 2
    _, by_key = evaluate(s, {"quality_thresholds": {"json": 0.0, "tool_call": 0.0, "*": 0.05}})
    assert by_key["quality"]["status"] == "fail"


def test_it_ignores_exact_match_differences_under_sampling():
    s = summary_passing()
    s["quality"]["regressions"] = [{"arm": "ngram", "task": "json", "check": "exact_match"}]
    _, by_key = evaluate(s)
    assert by_key["quality"]["status"] == "fail"
    s["quality"]["exact_expected"] = False
    _, by_key = evaluate(s)
    assert by_key["quality"]["status"] == "pass"


def test_it_ignores_other_arms_regressions():
    s = summary_passing()
    s["quality"]["regressions"] = [{"arm": "draft-0.5b", "task": "json", "check": "schema_valid"}]
    _, by_key = evaluate(s)
    assert by_key["quality"]["status"] == "pass"


def test_it_fails_memory_headroom_above_the_fraction():
    s = summary_passing()
    s["resources"][1]["peak_memory_bytes"] = 15 * 2**30  # 93.75% of 16 GiB
    _, by_key = evaluate(s)
    assert by_key["memory_headroom"]["status"] == "fail"
    _, by_key = evaluate(s, {"memory_fraction": 0.95})
    assert by_key["memory_headroom"]["status"] == "pass"


def test_it_reads_memory_as_not_measured_without_a_capacity_unless_one_is_set():
    s = summary_passing()
    for r in s["resources"]:
        del r["capacity_bytes"]
    _, by_key = evaluate(s)
    assert by_key["memory_headroom"]["status"] == "not_measured"
    _, by_key = evaluate(s, {"memory_capacity_bytes": 5 * 2**30})
    assert by_key["memory_headroom"]["status"] == "fail"


def test_it_fails_stability_when_one_load_is_significantly_worse():
    s = summary_passing()
    edit_rows(s, metric="ttft_s", stat="p95", load="4x", delta=0.2, delta_lo=0.1, delta_hi=0.3)
    result, by_key = evaluate(s)
    assert by_key["load_stability"]["status"] == "fail"
    assert "4x ttft_s p95" in by_key["load_stability"]["summary"]
    assert result["overall"] == "fail"


def test_it_passes_stability_when_the_proposal_excludes_the_worse_load():
    s = summary_passing()
    edit_rows(s, metric="ttft_s", stat="p95", load="4x", delta=0.2, delta_lo=0.1, delta_hi=0.3)
    _, by_key = evaluate(s, {"loads_in_scope": ["1x"]})
    assert by_key["load_stability"]["status"] == "pass"
    assert "4x ttft_s p95" in by_key["load_stability"]["notes"][0]


def test_it_does_not_call_a_change_inside_the_noise_floor_worse():
    s = summary_passing()
    edit_rows(
        s,
        metric="ttft_s",
        stat="p95",
        load="4x",
        delta=0.01,
        delta_lo=0.005,
        delta_hi=0.015,
        noise_floor=0.02,
    )
    _, by_key = evaluate(s)
    assert by_key["load_stability"]["status"] == "pass"


def test_it_reads_everything_as_not_measured_without_a_comparison():
    result, by_key = evaluate(None)
    assert {c["status"] for c in by_key.values()} == {"not_measured"}
    assert result["overall"] == "incomplete"
    assert gate.gate_failing(result) == []


def test_it_keeps_the_numbers_behind_each_verdict():
    _, by_key = evaluate(summary_passing())
    labels = [n["label"] for n in by_key["task_improvement"]["numbers"]]
    assert "lower bound" in labels
    memory = {n["label"]: n["value"] for n in by_key["memory_headroom"]["numbers"]}
    assert memory["candidate peak / capacity"] == pytest.approx(5 / 16)
    assert all(c["evidence"] for c in by_key.values())


def test_it_does_not_mutate_its_input():
    s = summary_passing()
    before = copy.deepcopy(s)
    evaluate(s, {"loads_in_scope": ["1x"]})
    assert s == before
