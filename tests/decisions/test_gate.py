"""The release gate on synthetic comparison summaries (analysis schema v1): each criterion flips
to fail when its condition is broken, and reads "not measured" when its evidence is missing."""

from __future__ import annotations

import copy

import pytest

from console.decisions import gate
from tests.decisions.factories import regression, summary_passing

GIB = 2**30


def evaluate(summary, settings=None, traffic_class="interactive", exact_expected=True, capacity=16 * GIB):
    facts = gate.gate_facts_from_summary(
        summary,
        candidate_arm="ngram",
        traffic_class=traffic_class,
        exact_expected=exact_expected,
        capacity_bytes=capacity,
    )
    result = gate.gate_evaluate(facts, settings, traffic_class=traffic_class)
    return result, {c["key"]: c for c in result["criteria"]}


def edit(summary, *, metric, stat=None, load=None, **values):
    """Change the candidate's headline delta rows matching metric/stat/load."""
    hit = 0
    for h in summary["headline"]:
        if h["arm"] != "ngram" or (load and h["load"] != load):
            continue
        for d in h["deltas"]:
            if d["metric"] == metric and (stat is None or d["stat"] == stat):
                d.update(values)
                hit += 1
    assert hit, "the edit matched no row"


def set_runs(summary, *, arm, load=None, successes):
    for r in summary["runs"]:
        if r["arm"] == arm and (load is None or r["load"] == load):
            r["successes"] = successes[r["repeat"]]


def test_it_passes_every_criterion_on_a_clear_win():
    result, by_key = evaluate(summary_passing())
    assert {k: c["status"] for k, c in by_key.items()} == {k: "pass" for k, _ in gate.CRITERIA}
    assert result["overall"] == "pass"
    assert gate.gate_failing(result) == []
    assert "successes_per_accelerator_hour" in by_key["task_improvement"]["summary"]


def test_it_computes_successes_per_accelerator_hour_with_a_welch_interval():
    facts = gate.gate_facts_from_summary(
        summary_passing(), candidate_arm="ngram", traffic_class="interactive"
    )
    row = next(r for r in facts["comparisons"] if r["metric"] == "successes_per_accelerator_hour")
    assert (row["base"], row["cand"], row["delta"]) == (102.0, 132.0, 30.0)
    # se = sqrt(8/2 + 8/2) = 2.828, Welch df = 2, t(0.975, 2) = 4.303: half-width 12.17
    assert row["delta_lo"] == pytest.approx(30 - 12.17, abs=0.01)
    assert row["delta_hi"] == pytest.approx(30 + 12.17, abs=0.01)
    assert row["ratio_lo"] == pytest.approx(1 + 17.83 / 102, abs=1e-3)


def test_it_fails_the_improvement_when_its_interval_reaches_zero():
    s = summary_passing()
    set_runs(s, arm="ngram", successes=(95.0, 120.0))
    result, by_key = evaluate(s)
    assert by_key["task_improvement"]["status"] == "fail"
    assert "not above zero" in by_key["task_improvement"]["summary"]
    assert result["overall"] == "fail"
    assert gate.gate_failing(result) == ["task_improvement"]


def test_it_weights_the_improvement_by_the_workload_mix():
    s = summary_passing()
    set_runs(s, arm="ngram", load="4x", successes=(60.0, 64.0))  # ratio about 0.61 at 4x
    _, equal = evaluate(s)
    assert equal["task_improvement"]["status"] == "fail"
    _, weighted = evaluate(s, {"load_weights": {"1x": 9, "4x": 1}})
    assert weighted["task_improvement"]["status"] == "pass"


def test_it_falls_back_to_the_paired_success_rate_with_a_single_run_per_arm():
    s = summary_passing()
    s["runs"] = [r for r in s["runs"] if r["repeat"] == 0]
    _, by_key = evaluate(s)
    c = by_key["task_improvement"]
    assert (
        c["status"] == "pass"
        and c["summary"].startswith("success:")
        and "fewer than two runs" in c["notes"][0]
    )
    edit(s, metric="success", ratio_lo=0.99, delta_lo=-0.01)
    _, by_key = evaluate(s)
    assert by_key["task_improvement"]["status"] == "fail"


def test_it_fails_the_latency_benefit_inside_the_noise_floor():
    s = summary_passing()
    edit(s, metric="tpot_s", stat="p95", load="4x", noise_floor=0.05)
    edit(s, metric="e2e_s", stat="p95", load="4x", noise_floor=2.0)
    _, by_key = evaluate(s)
    c = by_key["latency_benefit"]
    assert c["status"] == "fail"
    assert "4x" in c["summary"] and "1x" not in c["summary"]


def test_it_fails_the_latency_benefit_when_the_interval_contains_zero():
    s = summary_passing()
    edit(s, metric="tpot_s", stat="p95", delta_hi=0.001)
    edit(s, metric="e2e_s", stat="p95", delta_hi=0.001)
    _, by_key = evaluate(s)
    assert by_key["latency_benefit"]["status"] == "fail"


def class_slices(summary, *, value, tpot_lo, tpot_hi, n=30):
    for sl in summary["slices"]:
        if sl["dimension"] == "traffic_class":
            sl["n_requests"] = n
            if sl["arm"] == "ngram":
                sl["value"] = value
                sl |= {
                    "tpot_s_p95": 0.03,
                    "tpot_s_p95_delta": -0.02,
                    "tpot_s_mean": 0.025,
                    "tpot_s_mean_delta": (tpot_lo + tpot_hi) / 2,
                    "tpot_s_mean_delta_lo": tpot_lo,
                    "tpot_s_mean_delta_hi": tpot_hi,
                }


def test_it_judges_latency_on_the_promised_class_slice_when_it_is_part_of_the_traffic():
    s = summary_passing()
    class_slices(s, value="batch", tpot_lo=-0.02, tpot_hi=-0.01)
    _, by_key = evaluate(s, traffic_class="interactive")
    assert by_key["latency_benefit"]["status"] == "not_measured"  # no interactive rows at all
    _, by_key = evaluate(s, traffic_class="batch")
    c = by_key["latency_benefit"]
    assert c["status"] == "pass" and "mean intervals" in c["notes"][0]
    class_slices(s, value="batch", tpot_lo=-0.02, tpot_hi=0.01)
    _, by_key = evaluate(s, traffic_class="batch")
    assert by_key["latency_benefit"]["status"] == "fail"


@pytest.mark.parametrize(
    "task,checks",
    [("json", "schema_valid"), ("tool_call", "tool_valid"), ("json", "json_valid,schema_valid")],
)
def test_it_fails_quality_on_one_regression_in_a_critical_slice(task, checks):
    s = summary_passing()
    s["quality"]["regressions"] = [regression(task, checks)]
    _, by_key = evaluate(s)
    assert by_key["quality"]["status"] == "fail"
    assert f"{task} {checks.split(',')[0]} 1/20" in by_key["quality"]["summary"]


def test_it_allows_regressions_up_to_a_slice_threshold():
    s = summary_passing()
    s["quality"]["regressions"] = [regression("chat", "json_valid")]
    thresholds = {"quality_thresholds": {"json": 0.0, "tool_call": 0.0, "*": 0.05}}
    _, by_key = evaluate(s, thresholds)
    assert by_key["quality"]["status"] == "pass"  # 1 / 20 = 5% <= 5%
    s["quality"]["regressions"].append(regression("chat", "json_valid", load="4x"))
    _, by_key = evaluate(s, thresholds)
    assert by_key["quality"]["status"] == "fail"


def test_it_counts_exact_output_differences_only_when_exact_output_is_expected():
    s = summary_passing()
    for sl in s["slices"]:
        if sl["dimension"] == "task" and sl["value"] == "json" and sl["arm"] == "ngram":
            sl["exact_match_rate"] = 0.9  # 1 of 10 differs at each load
    _, by_key = evaluate(s, exact_expected=True)
    assert by_key["quality"]["status"] == "fail" and "json exact_match 2/20" in by_key["quality"]["summary"]
    _, by_key = evaluate(s, exact_expected=False)
    assert by_key["quality"]["status"] == "pass"


def test_it_ignores_other_arms_regressions():
    s = summary_passing()
    s["quality"]["regressions"] = [regression("json", "schema_valid", arm="draft-0.5b")]
    _, by_key = evaluate(s)
    assert by_key["quality"]["status"] == "pass"


def test_it_fails_memory_headroom_above_the_fraction():
    s = summary_passing()
    s["headline"][1]["peak_memory_bytes"] = 15 * GIB  # 93.75% of 16 GiB
    _, by_key = evaluate(s)
    assert by_key["memory_headroom"]["status"] == "fail"
    _, by_key = evaluate(s, {"memory_fraction": 0.95})
    assert by_key["memory_headroom"]["status"] == "pass"


def test_it_reads_memory_as_not_measured_without_a_capacity_unless_one_is_set():
    _, by_key = evaluate(summary_passing(), capacity=None)
    assert by_key["memory_headroom"]["status"] == "not_measured"
    _, by_key = evaluate(summary_passing(), {"memory_capacity_bytes": 5 * GIB}, capacity=None)
    assert by_key["memory_headroom"]["status"] == "fail"


def test_it_takes_capacity_from_the_gpu_when_there_is_one():
    cpu = [{"memory_bytes": 64 * GIB, "gpus": []}]
    gpu = [{"memory_bytes": 64 * GIB, "gpus": [{"memory_bytes": 80 * GIB}, {"memory_bytes": 40 * GIB}]}]
    assert gate.memory_capacity_from_hardware(cpu) == 64 * GIB
    assert gate.memory_capacity_from_hardware(gpu) == 40 * GIB
    assert gate.memory_capacity_from_hardware([{}]) is None


def test_it_fails_stability_when_one_load_is_significantly_worse():
    s = summary_passing()
    edit(s, metric="ttft_s", stat="p95", load="4x", delta=0.2, delta_lo=0.1, delta_hi=0.3)
    result, by_key = evaluate(s)
    assert by_key["load_stability"]["status"] == "fail"
    assert "4x ttft_s p95" in by_key["load_stability"]["summary"]
    assert result["overall"] == "fail"


def test_it_fails_stability_when_success_drops_at_a_load():
    s = summary_passing()
    edit(s, metric="met_deadline", load="4x", delta=-0.1, delta_lo=-0.15, delta_hi=-0.05)
    _, by_key = evaluate(s)
    assert by_key["load_stability"]["status"] == "fail"


def test_it_passes_stability_when_the_proposal_excludes_the_worse_load():
    s = summary_passing()
    edit(s, metric="ttft_s", stat="p95", load="4x", delta=0.2, delta_lo=0.1, delta_hi=0.3)
    _, by_key = evaluate(s, {"loads_in_scope": ["1x"]})
    assert by_key["load_stability"]["status"] == "pass"
    assert "4x ttft_s p95" in by_key["load_stability"]["notes"][0]


def test_it_does_not_call_a_change_inside_the_noise_floor_worse():
    s = summary_passing()
    edit(
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
    result, by_key = evaluate(None, capacity=None)
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
