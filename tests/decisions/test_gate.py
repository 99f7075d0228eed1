"""The release gate on synthetic comparison summaries (comparison schema v2): each criterion flips
to fail when its condition is broken, and reads "not measured" when its evidence is missing."""

from __future__ import annotations

import copy

import pytest

from console.decisions import gate
from tests.decisions.factories import quality_edit, regression, summary_make, summary_passing

GIB = 2**30


def evaluate(summary, settings=None, traffic_class="interactive", exact_expected=True, capacity=16 * GIB):
    facts = gate.gate_facts_from_summary(
        None if summary is None else summary_make(summary),
        candidate_arm="ngram",
        traffic_class=traffic_class,
        exact_expected=exact_expected,
        capacity_bytes=capacity,
    )
    result = gate.gate_evaluate(facts, settings, traffic_class=traffic_class)
    return result, {c["key"]: c for c in result["criteria"]}


def failing(result):
    """Keys of the failing criteria of a computed gate."""
    return [c["key"] for c in result.get("criteria") or [] if c.get("status") == "fail"]


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
    assert failing(result) == []
    assert "successes_per_accelerator_hour" in by_key["task_improvement"]["summary"]


def test_it_computes_successes_per_accelerator_hour_with_a_welch_interval():
    facts = gate.gate_facts_from_summary(
        summary_make(summary_passing()), candidate_arm="ngram", traffic_class="interactive"
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
    assert failing(result) == ["task_improvement"]


def test_it_weights_the_improvement_by_the_workload_mix():
    s = summary_passing()
    set_runs(s, arm="ngram", load="4x", successes=(60.0, 64.0))  # ratio about 0.61 at 4x
    _, equal = evaluate(s)
    assert equal["task_improvement"]["status"] == "fail"
    _, weighted = evaluate(s, {"load_weights": {"1x": 9, "4x": 1}})
    assert weighted["task_improvement"]["status"] == "pass"


def test_it_names_the_cost_basis_and_the_equal_weights_in_the_improvement_reason():
    _, by_key = evaluate(summary_passing())
    c = by_key["task_improvement"]
    assert "cost basis busy_time" in c["summary"] and "busy accelerator-hours" in c["summary"]
    assert "equal weights (none declared)" in c["summary"]
    _, by_key = evaluate(summary_passing(), {"load_weights": {"1x": 3, "4x": 1}})
    assert "declared workload weights" in by_key["task_improvement"]["summary"]


def test_it_fails_the_improvement_when_success_is_worse_beyond_the_margin():
    s = summary_passing()
    # still more successes per busy accelerator-hour, but 3 points fewer successes (lo -5 points)
    edit(s, metric="success", stat="mean", cand=0.87, delta=-0.03, delta_lo=-0.05, delta_hi=-0.01)
    _, by_key = evaluate(s)
    c = by_key["task_improvement"]
    assert c["status"] == "fail" and "success worse beyond the margin" in c["summary"]
    _, by_key = evaluate(s, {"success_margin": 0.1})  # a wider margin, listed as a deviation
    assert by_key["task_improvement"]["status"] == "pass"


def test_it_fails_the_improvement_when_a_small_loss_reaches_past_the_margin():
    s = summary_passing()
    edit(s, metric="success", stat="mean", delta=0.0, delta_lo=-0.009, delta_hi=0.01)
    assert evaluate(s)[1]["task_improvement"]["status"] == "pass"  # within one point: not worse
    edit(s, metric="success", stat="mean", delta_lo=-0.011)
    assert evaluate(s)[1]["task_improvement"]["status"] == "fail"


def test_it_does_not_measure_the_improvement_with_a_single_run_per_arm():
    s = summary_passing()
    s["runs"] = [r for r in s["runs"] if r["repeat"] == 0]
    _, by_key = evaluate(s)
    c = by_key["task_improvement"]
    assert c["status"] == "not_measured" and "needs two runs per arm" in c["summary"]


def test_it_does_not_measure_the_improvement_at_a_load_in_scope_without_runs():
    s = summary_passing()
    s["runs"] = [r for r in s["runs"] if r["load"] != "4x"]
    c = evaluate(s)[1]["task_improvement"]
    assert c["status"] == "not_measured" and c["summary"].startswith("4x: no successes_per_accelerator_hour")
    assert evaluate(s, {"loads_in_scope": ["1x"]})[1]["task_improvement"]["status"] == "pass"


def test_it_does_not_measure_the_improvement_without_busy_time():
    # A comparison from before busy time (hours were the replay window) no longer loads as a
    # summary; what still reaches the gate is the facts a decision stored from one.
    facts = gate.gate_facts_from_summary(summary_make(summary_passing()), candidate_arm="ngram",
                                         traffic_class="interactive", exact_expected=True, capacity_bytes=16 * GIB)
    facts["cost_basis"] = None
    result = gate.gate_evaluate(facts, None, traffic_class="interactive")
    c = {c["key"]: c for c in result["criteria"]}["task_improvement"]
    assert c["status"] == "not_measured" and "no busy time" in c["summary"]
    s = summary_passing()
    for r in s["runs"]:
        r["accelerator_hours"] = 0.0  # nothing was in flight
    assert evaluate(s)[1]["task_improvement"]["status"] == "not_measured"


def edit_class(summary, *, metric, stat=None, load=None, **values):
    """Change the candidate's promised-class (traffic_class slice) delta rows."""
    hit = 0
    for sl in summary["slices"]:
        if sl["arm"] != "ngram" or sl["dimension"] != "traffic_class" or (load and sl["load"] != load):
            continue
        for d in sl["deltas"]:
            if d["metric"] == metric and (stat is None or d["stat"] == stat):
                d.update(values)
                hit += 1
    assert hit, "the edit matched no row"


def test_it_fails_the_latency_benefit_inside_the_noise_floor():
    s = summary_passing()
    edit_class(s, metric="tpot_s", stat="p95", load="4x", noise_floor=0.05)
    _, by_key = evaluate(s)
    c = by_key["latency_benefit"]
    assert c["status"] == "fail"
    assert "4x" in c["summary"] and "1x" not in c["summary"]


def test_it_fails_the_latency_benefit_when_the_interval_contains_zero():
    s = summary_passing()
    edit_class(s, metric="tpot_s", stat="p95", delta_hi=0.001)
    _, by_key = evaluate(s)
    assert by_key["latency_benefit"]["status"] == "fail"


def test_it_fails_the_latency_benefit_when_e2e_gets_worse():
    # Old gate: p95 TPOT better while p95 e2e 2 s worse still passed (either metric sufficed).
    s = summary_passing()
    edit_class(s, metric="e2e_s", stat="p95", load="1x", delta=2.0, delta_lo=1.0, delta_hi=3.0, cand=6.0)
    _, by_key = evaluate(s)
    c = by_key["latency_benefit"]
    assert c["status"] == "fail" and "e2e_s:p95 worse" in c["summary"]


def test_it_does_not_measure_latency_without_a_noise_floor():
    # Old gate: passed and printed "beyond the noise floor" with no floor at all.
    s = summary_passing()
    s["noise_floor"] = [dict(f, n_repeat_pairs=0, noise_floor=None) for f in s["noise_floor"]]
    for sl in s["slices"] + s["headline"]:
        for d in sl.get("deltas") or []:
            d["noise_floor"] = None
    result, by_key = evaluate(s)
    assert by_key["latency_benefit"]["status"] == "not_measured"
    assert "no noise floor" in by_key["latency_benefit"]["summary"]
    assert by_key["load_stability"]["status"] == "not_measured"
    assert result["overall"] == "incomplete"


def test_it_does_not_measure_latency_at_a_load_in_scope_without_data():
    # Old gate: a load in scope with no data was skipped, and the gate still passed.
    s = summary_passing()
    s["slices"] = [sl for sl in s["slices"] if sl["load"] != "4x"]
    _, by_key = evaluate(s)
    c = by_key["latency_benefit"]
    assert c["status"] == "not_measured" and "4x" in c["summary"]


def test_it_does_not_measure_latency_when_the_class_is_too_small():
    s = summary_passing()
    edit_class(s, metric="tpot_s", stat="p95", measured=False, delta_lo=None, delta_hi=None,
               reason="not measured (n too small): 12 requests, p95 needs 40")
    _, by_key = evaluate(s)
    c = by_key["latency_benefit"]
    assert c["status"] == "not_measured" and "n too small" in c["summary"]


def test_it_needs_the_holm_adjusted_p_value_below_alpha():
    s = summary_passing()
    edit_class(s, metric="tpot_s", stat="p95", load="1x", p_holm=0.08)
    _, by_key = evaluate(s)
    assert by_key["latency_benefit"]["status"] == "fail" and "Holm p 0.08" in by_key["latency_benefit"]["summary"]


def test_it_does_not_pass_on_an_unstable_baseline():
    s = summary_passing()
    s["baseline_stability"] = {"stable": False, "message": "baseline unstable: rerun on a quieter host"}
    result, by_key = evaluate(s)
    assert by_key["latency_benefit"]["status"] == "not_measured"
    assert "quieter host" in by_key["latency_benefit"]["summary"]
    assert result["overall"] != "pass"


def test_it_judges_latency_on_the_declared_promised_class_only():
    _, by_key = evaluate(summary_passing(), traffic_class="batch")
    c = by_key["latency_benefit"]
    assert c["status"] == "not_measured" and "declared 'interactive'" in c["summary"]


@pytest.mark.parametrize("task,check", [("json", "schema_valid"), ("tool_call", "tool_valid"), ("json", "json_valid")])
def test_it_fails_quality_on_one_regression_in_a_critical_slice(task, check):
    s = summary_passing()
    quality_edit(s, task=task, check=check, regressions=1, cand_valid=9)
    _, by_key = evaluate(s)
    assert by_key["quality"]["status"] == "fail"
    assert f"{task} {check} 1/20" in by_key["quality"]["summary"]


def test_it_allows_regressions_up_to_a_slice_threshold():
    s = summary_passing()
    quality_edit(s, task="chat", check="exact_match", regressions=1)
    thresholds = {"quality_thresholds": {"json": 0.0, "tool_call": 0.0, "*": 0.05}}
    _, by_key = evaluate(s, thresholds)
    assert by_key["quality"]["status"] == "pass"  # 1 / 20 = 5% <= 5%
    quality_edit(s, task="chat", check="exact_match", load="4x", regressions=1)
    _, by_key = evaluate(s, thresholds)
    assert by_key["quality"]["status"] == "fail"


def test_it_allows_regressions_the_baseline_shows_between_its_own_repeats():
    s = summary_passing()
    quality_edit(s, task="json", check="schema_valid", regressions=1, improvements=1, baseline_flip_rate=0.1)
    _, by_key = evaluate(s)
    assert by_key["quality"]["status"] == "pass"


def test_it_fails_quality_on_complete_counts_beyond_the_regression_list_cap():
    # Old gate: read the capped regression list (1,000 rows) and ignored `truncated`.
    s = summary_passing()
    s["quality"]["regressions"] = [regression("chat", "json_valid")] * 1000
    s["quality"]["truncated"] = True
    quality_edit(s, task="json", check="schema_valid", n_applicable=5000, regressions=1200, cand_valid=3800, base_valid=5000)
    _, by_key = evaluate(s)
    assert by_key["quality"]["status"] == "fail" and "json schema_valid 1200/5010" in by_key["quality"]["summary"]


def test_it_does_not_measure_quality_when_nothing_was_checkable():
    # Old gate: passed quality with no applicable check (no JSON/tool requests, or all truncated).
    s = summary_passing()
    s["quality"]["counts"] = []
    _, by_key = evaluate(s)
    assert by_key["quality"]["status"] == "not_measured"
    s = summary_passing()
    for r in s["quality"]["counts"]:
        r["n_applicable"] = 0
    _, by_key = evaluate(s)
    assert by_key["quality"]["status"] == "not_measured"


def test_it_fails_quality_when_mcnemar_shows_the_candidate_worse():
    s = summary_passing()
    quality_edit(s, task="chat", check="exact_match", n_applicable=400, regressions=3)
    quality_edit(s, task="json", check="json_valid", n_applicable=400, regressions=30, improvements=5)
    _, by_key = evaluate(s, {"quality_thresholds": {"*": 0.1}})
    assert by_key["quality"]["status"] == "fail" and "McNemar" in by_key["quality"]["summary"]


def test_it_counts_exact_output_differences_only_when_exact_output_is_expected():
    s = summary_passing()
    quality_edit(s, task="json", check="exact_match", regressions=1)
    quality_edit(s, task="json", check="exact_match", load="4x", regressions=1)
    _, by_key = evaluate(s, exact_expected=True)
    assert by_key["quality"]["status"] == "fail" and "json exact_match 2/20" in by_key["quality"]["summary"]
    _, by_key = evaluate(s, exact_expected=False)
    assert by_key["quality"]["status"] == "pass"


def test_it_ignores_other_arms_regressions():
    s = summary_passing()
    quality_edit(s, task="json", check="schema_valid", arm="draft-0.5b", regressions=3)
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
    # one load left in scope: nothing to compare across loads, so not a pass either
    assert by_key["load_stability"]["status"] == "not_measured"


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


def test_it_does_not_measure_stability_with_a_single_load():
    # Old gate: passed "stable across load levels" with one load compared.
    _, by_key = evaluate(summary_passing(), {"loads_in_scope": ["1x"]})
    assert by_key["load_stability"]["status"] == "not_measured"
    assert "1 load level" in by_key["load_stability"]["summary"]


def test_it_refuses_invalid_gate_settings():
    with pytest.raises(gate.GateSettingsError) as err:
        gate.gate_settings_validate(
            {
                "latency_metrics": [],
                "stability_metrics": ["tpot_s:p42", "bogus:mean"],
                "quality_thresholds": {"json": 2.0},
                "memory_fraction": 7,
                "load_weights": {"9x": 1},
                "success_margin": 0.5,
            },
            loads=["1x", "4x"],
        )
    text = str(err.value)
    for fragment in (
        "latency_metrics: unknown gate setting",
        "'tpot_s:p42'",
        "'bogus:mean'",
        "quality_thresholds.json",
        "memory_fraction",
        "unknown load '9x'",
        "success_margin: a fraction between 0 and 0.2",
    ):
        assert fragment in text
    with pytest.raises(gate.GateSettingsError, match="switch the criterion off"):
        gate.gate_settings_validate({"stability_metrics": []})
    assert gate.gate_settings_validate({"memory_fraction": 0.8, "loads_in_scope": ["1x"]}, loads=["1x"]) == {
        "memory_fraction": 0.8,
        "loads_in_scope": ["1x"],
    }


def test_it_lists_every_deviation_from_the_default_settings():
    result, _ = evaluate(summary_passing(), {"memory_fraction": 0.95, "quality_thresholds": {"*": 0.1}})
    assert {d["key"] for d in result["deviations"]} == {"memory_fraction", "quality_thresholds"}
    result, _ = evaluate(summary_passing())
    assert result["deviations"] == []


def test_it_judges_a_slice_proposal_on_the_policy_holdout():
    policy = {
        "holdout": {"n_requests": 50, "share_on": 0.4, "policy": {"n": 50, "benefit": 0.02, "lo": 0.01, "hi": 0.03},
                    "lost_successes": 0, "regressions": 0},
        "overfitting": {"policy": False, "rules": [], "reasons": []},
    }
    facts = gate.gate_facts_from_summary(summary_make(summary_passing()), candidate_arm="ngram", traffic_class="interactive",
                                         exact_expected=True, capacity_bytes=16 * GIB)
    result = gate.gate_evaluate(facts, None, traffic_class="interactive", proposal="enable_for_slice", policy=policy)
    keys = [c["key"] for c in result["criteria"]]
    assert keys[0] == "policy_holdout" and "task_improvement" not in keys and result["overall"] == "pass"
    policy["overfitting"] = {"policy": True, "rules": [0], "reasons": ["rule 1: holdout interval includes zero"]}
    result = gate.gate_evaluate(facts, None, traffic_class="interactive", proposal="enable_for_slice", policy=policy)
    assert result["criteria"][0]["status"] == "fail" and "overfitting" in result["criteria"][0]["summary"]
    result = gate.gate_evaluate(facts, None, traffic_class="interactive", proposal="enable_for_slice", policy=None)
    assert result["criteria"][0]["status"] == "not_measured"


def test_it_reads_everything_as_not_measured_without_a_comparison():
    result, by_key = evaluate(None, capacity=None)
    assert {c["status"] for c in by_key.values()} == {"not_measured"}
    assert result["overall"] == "incomplete"
    assert failing(result) == []


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


def _not_speculating(summary, *, arm="ngram", load="1x"):
    reason = f"server did not speculate: {arm} is configured to speculate, yet its run-level (server counters) evidence at load {load} shows no draft at all"
    summary["speculation"] = [
        {"arm": arm, "load": load, "source": "run-level (server counters)", "drafts": 0, "did_not_speculate": True, "reason": reason},
        {"arm": arm, "load": "4x", "source": "per-request", "drafts": 40, "did_not_speculate": False, "reason": None},
    ]
    return summary


def test_it_refuses_to_pass_a_candidate_whose_server_did_not_speculate():
    result, by_key = evaluate(_not_speculating(summary_passing()))
    assert by_key["latency_benefit"]["status"] == "fail"
    assert by_key["latency_benefit"]["summary"].startswith("server did not speculate")
    assert "load 1x" in by_key["latency_benefit"]["summary"] and "4x" not in by_key["latency_benefit"]["summary"]
    assert by_key["latency_benefit"]["evidence"] == [{"label": "speculation check", "anchor": "speculation"}]
    assert result["overall"] == "fail" and "latency_benefit" in failing(result)


def test_it_refuses_a_slice_policy_on_a_candidate_that_did_not_speculate():
    s = _not_speculating(summary_passing())
    facts = gate.gate_facts_from_summary(summary_make(s), candidate_arm="ngram", traffic_class="interactive")
    policy = {  # a holdout that passes on its own
        "holdout": {"n_requests": 50, "share_on": 0.4, "policy": {"n": 50, "benefit": 0.02, "lo": 0.01, "hi": 0.03},
                    "lost_successes": 0, "regressions": 0},
        "overfitting": {"policy": False, "rules": [], "reasons": []},
    }
    assert gate.criterion_policy_holdout(policy)["status"] == "pass"
    result = gate.gate_evaluate(facts, None, traffic_class="interactive", proposal="enable_for_slice", policy=policy)
    holdout = result["criteria"][0]
    assert holdout["key"] == "policy_holdout" and holdout["status"] == "fail"
    assert holdout["summary"].startswith("server did not speculate")


def test_it_only_refuses_for_the_arm_that_did_not_speculate():
    result, by_key = evaluate(_not_speculating(summary_passing(), arm="other"))
    assert by_key["latency_benefit"]["status"] == "pass" and result["overall"] == "pass"


# -- criterion 4 on an engine that preallocates its KV cache (vLLM) ---------------------------


def kv_summary(*, base_preempt, cand_preempt, base_tokens=16000, cand_tokens=12000):
    """A passing summary whose runs recorded vLLM KV figures: ``*_preempt`` per repeat and load."""
    import pandas as pd

    from console.analysis.comparison.kv import kv_rows

    runs = []
    for arm, preempt, tokens in (("baseline", base_preempt, base_tokens), ("ngram", cand_preempt, cand_tokens)):
        for load in ("1x", "4x"):
            for repeat, p in enumerate(preempt):
                kv = {"kv_cache_tokens": tokens, "preemptions": p, "kv_usage_peak": 0.5, "kv_usage_mean": 0.25}
                runs.append({"run_id": len(runs) + 1, "arm": arm, "load": load, "repeat": repeat, "spec_counters": {"kv": kv}})
    s = summary_passing()
    s["kv"] = kv_rows(pd.DataFrame(runs), base_arm="baseline")
    s["headline"][1]["peak_memory_bytes"] = 15.9 * GIB  # preallocated: the peak is not what is judged
    return s


def test_it_passes_kv_headroom_when_preemptions_stay_within_the_baseline_repeats_floor():
    _, by_key = evaluate(kv_summary(base_preempt=[2, 5], cand_preempt=[5, 6]))  # +2 per run, floor 3
    c = by_key["memory_headroom"]
    assert c["status"] == "pass"
    assert "25.0% KV capacity lost at 1x" in c["summary"]
    numbers = {n["label"]: n["value"] for n in c["numbers"]}
    assert numbers["4x: KV capacity lost"] == pytest.approx(0.25)
    assert numbers["4x: A/A floor (baseline repeats)"] == 3
    assert c["evidence"] == [{"label": "KV cache per arm", "anchor": "kv-cache"}]


def test_it_fails_kv_headroom_when_the_candidate_is_preempted_more_than_the_noise_allows():
    _, by_key = evaluate(kv_summary(base_preempt=[2, 3], cand_preempt=[9, 10]))  # +7 per run, floor 1
    c = by_key["memory_headroom"]
    assert c["status"] == "fail"
    assert "+7.0 preemptions per run at 1x (A/A floor 1)" in c["summary"]


def test_it_reads_kv_headroom_preemptions_as_not_measured_with_one_baseline_repeat_or_no_counter():
    _, by_key = evaluate(kv_summary(base_preempt=[2], cand_preempt=[9]))
    c = by_key["memory_headroom"]
    assert c["status"] == "not_measured"
    assert "no A/A floor" in c["summary"] and "25.0% KV capacity lost" in c["summary"]
    _, by_key = evaluate(kv_summary(base_preempt=[None, None], cand_preempt=[1, 1]))
    assert by_key["memory_headroom"]["status"] == "not_measured"
    assert "preemptions not counted at 1x" in by_key["memory_headroom"]["summary"]
    # Out of scope loads are not judged; none left in scope is not a pass.
    _, by_key = evaluate(kv_summary(base_preempt=[2, 3], cand_preempt=[9, 10]), {"loads_in_scope": ["9x"]})
    assert by_key["memory_headroom"]["status"] == "not_measured"


def test_it_keeps_host_memory_against_capacity_for_engines_without_kv_figures():
    s = summary_passing()
    s["kv"] = []  # hf on CPU: nothing preallocated
    s["headline"][1]["peak_memory_bytes"] = 15 * GIB
    _, by_key = evaluate(s)
    assert by_key["memory_headroom"]["status"] == "fail"
    assert "peak 93.8% of capacity" in by_key["memory_headroom"]["summary"]


def test_it_answers_the_checklists_memory_question_from_kv_figures_on_vllm():
    from console.decisions.checklist import checklist_prefill

    def memory_item(summary):
        facts = gate.gate_facts_from_summary(summary_make(summary), candidate_arm="ngram", traffic_class="interactive")
        return next(i for i in checklist_prefill({"facts": facts}) if i["key"] == "memory_impact")

    item = memory_item(kv_summary(base_preempt=[2, 3], cand_preempt=[2, 3]))
    assert (item["answer"], item["detail"]) == ("yes", "KV capacity and preemptions per arm measured")
    assert memory_item(summary_passing())["detail"] == "peak memory per arm measured"


# --- criterion 1 on capacity at the SLO (docs/capacity.md) -------------------------------------


def _with_capacity(summary, *, cand=(3.0, 2.8, 3.4), base=(1.0, 0.9, 1.2), repeats=2):
    """A comparison whose capacity search ran: (point, interval low, interval high) per arm."""
    from console.analysis.comparison.capacity_stage import capacity_ratio

    s = copy.deepcopy(summary)
    rows = {}
    for arm, (point, low, high) in (("baseline", base), ("ngram", cand)):
        rows[arm] = {"arm": arm, "is_baseline": arm == "baseline", "rate_multiplier": point,
                     "interval": [low, high], "n_repeats": repeats, "steps": [], "slo": {"attainment": 0.99}}
    rows["ngram"].update(capacity_ratio(rows["ngram"], rows["baseline"]))
    rows["baseline"].update({"ratio": None, "ratio_interval": [None, None]})
    s["capacity"] = {"slo": {"traffic_class": "interactive", "attainment": 0.99}, "arms": list(rows.values())}
    s["cost_basis"] = "capacity"
    return s


def test_criterion_one_uses_capacity_when_a_search_ran():
    s = _with_capacity(summary_passing())
    set_runs(s, arm="ngram", successes=(95.0, 120.0))  # busy-time efficiency would fail: not read now
    _, by_key = evaluate(s)
    c = by_key["task_improvement"]
    assert c["status"] == "pass", c["summary"]
    assert "capacity at the SLO" in c["summary"] and "equal weights (none declared)" in c["summary"]
    assert any(n["label"].startswith("ratio interval lower end") and n["value"] == pytest.approx(2.8 / 1.2) for n in c["numbers"])
    assert c["evidence"][0]["anchor"] == "capacity"


def test_criterion_one_fails_when_the_capacity_ratio_interval_reaches_one():
    # an A/A-like pair: the candidate's low end equals the baseline's high end
    _, by_key = evaluate(_with_capacity(summary_passing(), cand=(1.3, 1.2, 1.5)))
    c = by_key["task_improvement"]
    assert c["status"] == "fail" and "ratio interval lower end 1 not above 1" in c["summary"]


def test_criterion_one_on_capacity_still_guards_success():
    s = _with_capacity(summary_passing())
    edit(s, metric="success", stat="mean", cand=0.87, delta=-0.03, delta_lo=-0.05, delta_hi=-0.01)
    _, by_key = evaluate(s)
    assert by_key["task_improvement"]["status"] == "fail"
    assert "success worse beyond the margin" in by_key["task_improvement"]["summary"]


def test_criterion_one_on_capacity_is_not_measured_when_a_search_left_its_end_open():
    _, by_key = evaluate(_with_capacity(summary_passing(), base=(16.0, 16.0, None)))
    c = by_key["task_improvement"]
    assert c["status"] == "not_measured" and "raise the bracket's hi" in c["summary"]
    s = _with_capacity(summary_passing())
    s["capacity"]["arms"] = [a for a in s["capacity"]["arms"] if a["arm"] != "ngram"]
    _, by_key = evaluate(s)
    assert by_key["task_improvement"]["status"] == "not_measured"
    assert "no finished search of the candidate" in by_key["task_improvement"]["summary"]
    # a candidate that met the SLO nowhere, against a baseline that did: that is a fail
    _, by_key = evaluate(_with_capacity(summary_passing(), cand=(None, None, 0.5)))
    assert by_key["task_improvement"]["status"] == "fail"


def test_criterion_one_reads_the_experiments_declared_load_weights():
    s = summary_passing()
    set_runs(s, arm="ngram", load="4x", successes=(60.0, 64.0))  # ratio about 0.61 at 4x
    s["load_weights"] = {"1x": 9.0, "4x": 1.0}
    _, by_key = evaluate(s)
    c = by_key["task_improvement"]
    assert c["status"] == "pass" and "declared workload weights (the experiment's load levels)" in c["summary"]
    # the decision's own setting overrides them, and says so
    _, by_key = evaluate(s, {"load_weights": {"1x": 1, "4x": 9}})
    assert by_key["task_improvement"]["status"] == "fail"
    assert "declared workload weights (gate settings)" in by_key["task_improvement"]["summary"]


def test_a_success_gain_too_uncertain_to_rule_out_a_loss_is_not_called_worse():
    """A point estimate of +7.5% whose lower bound reaches below the margin fails non-inferiority,
    and the reason says so in those words, never "worse beyond the margin" (issue 22, point 4)."""
    s = summary_passing()
    edit(s, metric="success", stat="mean", cand=0.975, delta=0.075, delta_lo=-0.04, delta_hi=0.19)
    _, by_key = evaluate(s)
    c = by_key["task_improvement"]
    assert c["status"] == "fail" and "worse beyond the margin" not in c["summary"]
    assert "success not shown within the margin: estimate +7.5%, but its lower bound -4.0% is below -1.0%" in c["summary"]
