import json

import numpy as np
import pandas as pd
import pytest

from console.analysis.comparison import comparison_compute
from tests.analysis.builders import synthetic_experiment

DEADLINES = {"interactive": {"e2e_s": 10, "ttft_s": 1}, "batch": {"e2e_s": 120}}


@pytest.fixture(scope="module")
def experiment():
    return synthetic_experiment(
        n_requests=120,
        arms={"base": 1.0, "k2": 0.8, "k4": 0.6},
        k={"k2": 2, "k4": 4},
        repeats=2,
        loads=("1x", "2x"),
        seed=1,
    )


@pytest.fixture(scope="module")
def summary(experiment):
    requests, runs = experiment
    return comparison_compute(
        requests,
        runs,
        deadlines=DEADLINES,
        cost_per_hour_usd=2.0,
        sweeps={"draft": {"k2": 2, "k4": 4}},
        n_boot=200,
        seed=0,
    )


def _row(rows, **keys):
    found = [r for r in rows if all(r.get(k) == v for k, v in keys.items())]
    assert len(found) == 1, keys
    return found[0]


def _delta(row, metric, stat):
    return _row(row["deltas"], metric=metric, stat=stat)


def test_it_returns_strict_json(summary):
    text = json.dumps(summary, allow_nan=False)
    assert json.loads(text)["schema_version"] == 2
    assert set(summary) >= {
        "headline",
        "runs",
        "spread",
        "slices",
        "acceptance",
        "quality",
        "noise_floor",
        "knees",
    }


def test_it_has_one_headline_row_per_arm_and_load(summary):
    keys = sorted((r["arm"], r["load"]) for r in summary["headline"])
    assert keys == [(a, lo) for a in ("base", "k2", "k4") for lo in ("1x", "2x")]
    base = _row(summary["headline"], arm="base", load="1x")
    assert base["is_baseline"] and base["deltas"] == []
    assert base["n_requests"] == 240 and base["n_runs"] == 2  # 120 requests x 2 repeats


def test_it_calls_a_faster_candidate_better_on_tpot(summary):
    k4 = _row(summary["headline"], arm="k4", load="1x")
    tpot = _delta(k4, "tpot_s", "p50")
    # decode is 0.6x the baseline's: TPOT drops by about 40 percent
    assert tpot["ratio"] == pytest.approx(0.6, abs=0.05)
    assert tpot["delta_lo"] <= tpot["delta"] <= tpot["delta_hi"] < 0
    assert tpot["verdict"] == "better"
    assert tpot["n_pairs"] > 0
    # TTFT is drawn from the same distribution in both arms
    assert _delta(k4, "ttft_s", "mean")["ratio"] == pytest.approx(1.0, abs=0.1)


def test_it_reports_acceptance_for_candidates_only(summary):
    k2 = _row(summary["headline"], arm="k2", load="1x")
    assert 0 < k2["acceptance_rate"] < 1
    assert k2["accepted_per_pass"] == pytest.approx(1 + 2 * k2["acceptance_rate"])  # k = 2 every step
    base = _row(summary["headline"], arm="base", load="1x")
    assert base["steps"] == 0 and base["acceptance_rate"] is None
    # the acceptance rate's interval, the request the unit: around the rate, none for the baseline
    assert 0 <= k2["acceptance_rate_lo"] < k2["acceptance_rate"] < k2["acceptance_rate_hi"] <= 1
    assert base["acceptance_rate_lo"] is None and base["acceptance_rate_hi"] is None
    positions = [r for r in summary["acceptance"]["by_position"] if r["arm"] == "k4" and r["load"] == "1x"]
    assert [r["position"] for r in positions] == [1, 2, 3, 4]
    assert all(a["rate"] >= b["rate"] for a, b in zip(positions, positions[1:], strict=False))


def test_it_slices_by_every_dimension(summary):
    dims = {r["dimension"] for r in summary["slices"]}
    assert dims == {"task", "traffic_class", "prompt_bucket", "output_bucket"}
    chat = _row(summary["slices"], dimension="task", value="chat", arm="k4", load="1x")
    assert chat["tpot_s_mean_delta_lo"] <= chat["tpot_s_mean_delta"] <= chat["tpot_s_mean_delta_hi"]
    assert chat["tpot_s_p50_delta"] < 0
    assert chat["success_mean"] == 1.0  # nothing fails, everything is valid and in time
    interactive = _row(summary["slices"], dimension="traffic_class", value="interactive", arm="k4", load="1x")
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        for stat in ("mean", "p50", "p95"):
            lo, d, hi = (interactive[f"{metric}_{stat}_delta{x}"] for x in ("_lo", "", "_hi"))
            assert lo <= d <= hi, (metric, stat)
    assert interactive["tpot_s_p95_delta_hi"] < 0


def test_it_measures_the_noise_floor_over_baseline_repeats(summary):
    floors = [r for r in summary["noise_floor"] if r["load"] == "1x"]
    assert {r["n_repeat_pairs"] for r in floors} == {1}
    assert all(r["noise_floor"] is not None for r in floors if r["metric"] == "tpot_s")


def test_it_marks_a_knee_per_sweep_and_slice(summary):
    overall = _row(summary["knees"], sweep="draft", load="1x", dimension=None)
    assert [p["k"] for p in overall["points"]] == [0, 2, 4]  # the baseline joins as k = 0
    assert [(s["from_k"], s["to_k"]) for s in overall["steps"]] == [(0, 2), (2, 4)]
    assert overall["knee_k"] in (0, 2, 4)
    assert any(k["dimension"] == "task" for k in summary["knees"])


def test_it_reports_runs_and_spread(summary):
    assert len(summary["runs"]) == 12  # 3 arms x 2 loads x 2 repeats
    spread = _row(summary["spread"], arm="k4", load="1x", metric="tpot_s_p50")
    assert spread["n_runs"] == 2 and spread["min"] <= spread["mean"] <= spread["max"]


def _with_broken_arm(experiment):
    requests, runs = experiment
    broken = requests[requests["arm"] == "k4"].copy()
    broken["arm"] = "broken"
    broken["run_id"] += 1000
    json_rows = broken["task"] == "json"
    broken.loc[json_rows, "output_text"] = '{"a": '  # truncated JSON on the json slice
    broken_runs = runs[runs["arm"] == "k4"].assign(arm="broken", run_id=lambda r: r["run_id"] + 1000)
    return (
        pd.concat([requests, broken], ignore_index=True),
        pd.concat([runs, broken_runs], ignore_index=True),
        int(json_rows.sum()),
    )


def test_it_shows_every_regression_of_a_broken_candidate(experiment):
    requests, runs, n_broken = _with_broken_arm(experiment)
    out = comparison_compute(requests, runs, deadlines=DEADLINES, cost_per_hour_usd=2.0, n_boot=100)
    broken = [r for r in out["quality"]["regressions"] if r["arm"] == "broken"]
    assert len(broken) == n_broken > 0
    assert {r["task"] for r in broken} == {"json"}
    assert sum(r["n_regressions"] for r in out["headline"] if r["arm"] == "broken") == n_broken
    assert sum(r["n_regressions"] for r in out["headline"] if r["arm"] == "k4") == 0
    k4 = _row(out["headline"], arm="k4", load="1x")
    bad = _row(out["headline"], arm="broken", load="1x")
    assert bad["successes"] < k4["successes"]
    assert bad["cost_per_success_usd"] > k4["cost_per_success_usd"]
    assert _delta(bad, "success", "mean")["verdict"] == "worse"
    json_slice = _row(out["slices"], dimension="task", value="json", arm="broken", load="1x")
    assert json_slice["schema_valid_rate"] == 0.0


def test_it_explains_a_cost_without_successes(experiment):
    requests, runs = experiment
    requests = requests.copy()
    failed = requests["arm"] == "k2"
    requests.loc[failed, "error"] = "engine crashed"
    out = comparison_compute(requests, runs, deadlines=DEADLINES, cost_per_hour_usd=2.0, n_boot=50)
    k2 = _row(out["headline"], arm="k2", load="1x")
    assert k2["cost_per_success_usd"] is None
    assert k2["cost_per_success_reason"] == "no successful requests"
    assert k2["n_completed"] == 0
    assert _delta(k2, "tpot_s", "p50")["verdict"] == "not measured"  # no pairs left to compare


def test_it_notes_a_missing_noise_floor_with_one_repeat():
    requests, runs = synthetic_experiment(n_requests=30, repeats=1, seed=2)
    out = comparison_compute(requests, runs, deadlines=None, cost_per_hour_usd=1.0, n_boot=50)
    assert any("no noise floor" in n for n in out["notes"])
    spec = _row(out["headline"], arm="spec", load="1x")
    assert all(d["noise_floor"] is None for d in spec["deltas"])


def test_it_refuses_an_ambiguous_baseline(experiment):
    requests, runs = experiment
    requests = requests.assign(is_baseline=True)
    with pytest.raises(ValueError, match="exactly one baseline"):
        comparison_compute(requests, runs, deadlines=None, cost_per_hour_usd=1.0, n_boot=10)
    out = comparison_compute(
        requests, runs, deadlines=None, cost_per_hour_usd=1.0, baseline_arm="base", n_boot=10
    )
    assert out["baseline_arm"] == "base"
    assert np.isfinite(_row(out["headline"], arm="k2", load="2x")["tpot_s_p50"])


def test_it_reads_validity_flags_stored_by_the_worker(experiment):
    from console.analysis.quality import quality_flags

    requests, runs, n_broken = _with_broken_arm(experiment)
    flags = quality_flags(requests, use_stored=False)
    stored = requests.assign(
        json_valid=flags["json_valid"],
        schema_valid=flags["schema_valid"],
        tool_call_valid=flags["tool_valid"],
    )
    out = comparison_compute(stored, runs, deadlines=DEADLINES, cost_per_hour_usd=2.0, n_boot=50)
    assert out["quality"]["n_regressions"] == n_broken
    assert {r["reason"] for r in out["quality"]["regressions"]} == {"output is not valid JSON"}


def test_it_counts_the_pairs_a_failed_request_removes_from_the_headline(experiment):
    requests, runs = experiment
    requests = requests.copy()
    failed_ids = sorted(requests["request_id"].unique())[:7]
    failed = (requests["arm"] == "k2") & (requests["load"] == "1x") & requests["request_id"].isin(failed_ids)
    requests.loc[failed, "error"] = "engine crashed"
    out = comparison_compute(requests, runs, deadlines=DEADLINES, cost_per_hour_usd=2.0, n_boot=50)
    k2 = _delta(_row(out["headline"], arm="k2", load="1x"), "tpot_s", "p50")
    k4 = _delta(_row(out["headline"], arm="k4", load="1x"), "tpot_s", "p50")
    repeats = requests["repeat"].nunique()
    assert k2["n_excluded"] == 7 * repeats and k4["n_excluded"] == 0
    assert k2["n_pairs"] + k2["n_excluded"] == k4["n_pairs"]


def test_it_prices_accelerator_hours_on_busy_time(summary, experiment):
    _, runs = experiment
    assert summary["cost_basis"] == "busy_time"
    for r in summary["runs"]:
        assert r["accelerator_hours"] == pytest.approx(r["busy_s"] / 3600)  # one accelerator
        assert 0 < r["busy_s"] <= r["wall_s"] + 1e-9
    for h in summary["headline"]:
        mine = [r for r in summary["runs"] if r["arm"] == h["arm"] and r["load"] == h["load"]]
        assert h["busy_s"] == pytest.approx(sum(r["busy_s"] for r in mine))
        assert h["cost_usd"] == pytest.approx(h["busy_s"] / 3600 * 2.0)
    # the faster candidate holds the engine for less time over the same arrivals
    assert _row(summary["headline"], arm="k4", load="1x")["busy_s"] < _row(summary["headline"], arm="base", load="1x")["busy_s"]
