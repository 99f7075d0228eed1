"""Same hardware, driver and versions across the runs of a comparison: a differing GPU or library
version is a mismatch naming the arms, runs and field; hostnames, PIDs, GPU indices and times are not."""

from __future__ import annotations

import pandas as pd
import pytest

from console.analysis.comparison.environment import environment_check

H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85_520_809_984, "index": 0, "uuid": "GPU-a"}
VERSIONS = {"engine": "vllm", "vllm": "0.32.0", "torch": "2.13.0", "transformers": "5.17.0", "start_s": "31.2"}


def _runs():
    return pd.DataFrame({"run_id": [1, 2, 3, 4], "arm": ["base", "base", "spec", "spec"], "load": ["1x"] * 4})


def _env(**per_run):
    """Every run on the same H100 host except what ``per_run`` (run id -> (hardware, versions) changes) says."""
    out = {}
    for run_id in (1, 2, 3, 4):
        hardware = {"hostname": f"gpu-{run_id}", "cpu_model": "Xeon", "cpu_count": 16, "memory_bytes": 2**37 + run_id,
                    "gpus": [dict(H100, index=run_id % 2, uuid=f"GPU-{run_id}")], "pid": 1000 + run_id}
        versions = dict(VERSIONS, start_s=f"{30 + run_id}")
        hw, vs = per_run.get(f"r{run_id}", ({}, {}))
        out[run_id] = {"hardware": hardware | hw, "versions": versions | vs}
    return out


def test_it_finds_nothing_when_only_hostnames_pids_gpu_indices_and_timings_differ():
    got = environment_check(run_environments=_env(), runs=_runs())
    assert got["mismatches"] == [] and got["n_runs_recorded"] == 4
    assert "gpu_names" in got["fields"] and "hostname" not in got["fields"]


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        (({"gpus": [dict(H100, name="NVIDIA A100-SXM4-40GB")]}, {}), "gpu_names", "NVIDIA A100-SXM4-40GB"),
        (({}, {"transformers": "5.18.1"}), "transformers", "5.18.1"),
        (({"gpus": [H100, H100]}, {}), "gpu_count", "2"),
    ],
)
def test_it_names_the_arms_runs_and_field_that_differ(change, field, value):
    got = environment_check(run_environments=_env(r3=change, r4=change), runs=_runs())
    mismatch = next(m for m in got["mismatches"] if m["field"] == field)
    assert {tuple(v["arms"]): tuple(v["run_ids"]) for v in mismatch["values"]} == {("base",): (1, 2), ("spec",): (3, 4)}
    assert field in mismatch["message"] and value in mismatch["message"]
    assert "base (runs 1, 2)" in mismatch["message"] and "spec (runs 3, 4)" in mismatch["message"]


def test_it_does_not_compare_a_field_some_runs_did_not_record():
    env = _env()
    del env[3]["versions"]["transformers"]
    got = environment_check(run_environments=env, runs=_runs())
    assert got["mismatches"] == [] and any("transformers" in n and "3" in n for n in got["notes"])
    assert environment_check(run_environments={}, runs=_runs())["n_runs_recorded"] == 0


@pytest.mark.django_db
def test_it_shows_a_gpu_mismatch_of_stored_runs_and_the_gate_refuses(viewer_client):
    from console.analysis import services
    from console.analysis.selectors import comparison_summary_for_experiment
    from console.decisions import gate
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=24, ks=(4,), loads="1x", repeats=1)
    for run in experiment.runs.select_related("arm"):
        gpu = "NVIDIA H100 80GB HBM3" if run.arm.is_baseline else "NVIDIA A100-SXM4-40GB"
        run.hardware = {"hostname": f"host-{run.pk}", "cpu_model": "Xeon", "cpu_count": 16,
                        "gpus": [{"name": gpu, "memory_bytes": 80 * 2**30}]}
        run.versions = {"engine": "openai", "server": "0.32.0"}
        run.save(update_fields=["hardware", "versions"])
    services.comparison_refresh(experiment_id=experiment.pk, n_boot=50)
    summary = comparison_summary_for_experiment(experiment=experiment)
    [mismatch] = summary.environment.mismatches
    assert mismatch.field == "gpu_names" and {v.arms for v in mismatch.values} == {("baseline",), (summary.arm_order[1],)}
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    assert 'id="environment"' in html and "gpu_names differs between runs" in html and "NVIDIA A100-SXM4-40GB" in html
    facts = gate.gate_facts_from_summary(summary, candidate_arm=summary.arm_order[1], traffic_class="interactive")
    latency = next(c for c in gate.gate_evaluate(facts, None, traffic_class="interactive")["criteria"] if c["key"] == "latency_benefit")
    assert latency["status"] == "fail" and "gpu_names" in latency["summary"]
