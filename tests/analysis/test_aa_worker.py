"""A real A/A experiment through the worker: the baseline config entered again as a candidate,
three repeats, the smallest model on the CPU. The comparison must show no difference beyond the
noise floor on the primary metric, and the gate must not pass."""

from __future__ import annotations

import json

import pytest

from console.experiments.models import Experiment, Run
from console.experiments.services import experiment_create, experiment_start
from tests.conftest import wait_for
from tests.experiments.factories import trace_make

pytestmark = [pytest.mark.model, pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
MODEL = "smollm2-135m"


def _prompts(shared_data, n):
    # Real prompts: HumanEval code and GSM8K questions, alternating. Without a chat template the
    # small model ends about half the GSM8K answers after one token (no TPOT there), so the
    # trace is long enough for the primary statistic to be measured anyway.
    gsm8k = [json.loads(line)["question"] for line in (shared_data / "prompts/gsm8k/test.first300_filtered.jsonl").open()]
    humaneval = [json.loads(line)["prompt"] for line in (shared_data / "prompts/humaneval/HumanEval.jsonl").open()]
    return [p for pair in zip(humaneval, gsm8k, strict=False) for p in pair][:n]


def test_it_finds_no_difference_and_does_not_pass_an_a_a_experiment(celery_worker_proc, shared_data, engineer):
    from console.analysis.comparison.schema import summary_load
    from console.analysis.selectors import comparison_for_experiment, comparison_state
    from console.decisions import gate
    from workers.catalog.resolve import model_fetch

    model_fetch(name=MODEL, progress=False)
    n = 20
    trace = trace_make(name="aa12", prompts=_prompts(shared_data, n), arrivals=[0.25 * i for i in range(n)], max_tokens=8)
    experiment = experiment_create(
        name="A/A",
        trace=trace,
        engine="hf",
        target_model=MODEL,
        baseline_engine_args={"dtype": "float32"},
        candidates=[{"speculative_config": None, "label": "baseline again"}],
        load_levels="1x",
        repeats=3,
        warmup=1,
        sampling="greedy",
        # p50 needs 10 requests with a TPOT: the primary endpoint is measured
        endpoints={"primary_metric": "tpot_s", "primary_stat": "p50"},
        created_by=engineer,
    )
    assert [(a.label, a.is_baseline, a.config.speculative_config) for a in experiment.arms.order_by("position")] == [
        ("baseline", True, None),
        ("baseline again", False, None),
    ]
    experiment_start(experiment=experiment)
    wait_for(lambda: Experiment.objects.get(pk=experiment.pk).status != "running", timeout=1500, what="experiment end")
    runs = list(Run.objects.filter(experiment=experiment))
    assert all(r.status == "done" for r in runs), [(r.arm.label, r.status, r.error) for r in runs]
    wait_for(lambda: comparison_state(experiment=experiment) == "ready", timeout=300, what="comparison computed")
    summary = comparison_for_experiment(experiment=experiment)
    primary = [p for p in summary["primary"] if p["metric"] == "tpot_s"]
    assert len(primary) == 1, primary
    assert primary[0]["measured"], (primary[0]["reason"], primary[0]["n_requests"], summary["notes"])
    # An A/A must never read "better". On a quiet host it reads "not distinguishable"; a busy
    # host can make one arm's runs slower than the baseline's own repeats differ (seen once at
    # 7% on p50 TPOT with the machine shared), which reads "worse" and blocks the gate too.
    assert primary[0]["verdict"] in ("not distinguishable", "worse"), primary[0]
    assert primary[0]["noise_floor"] is not None
    facts = gate.gate_facts_from_summary(summary_load(summary), candidate_arm="baseline again", traffic_class="interactive", exact_expected=True)
    result = gate.gate_evaluate(facts, None, traffic_class="interactive")
    assert result["overall"] != "pass"
    statuses = {c["key"]: c["status"] for c in result["criteria"]}
    assert statuses["latency_benefit"] != "pass" and statuses["task_improvement"] != "pass"
    # Greedy, same config: every output identical, so no quality regression either
    counts = [c for c in summary["quality"]["counts"] if c["check"] == "exact_match"]
    assert counts and all(c["regressions"] == 0 for c in counts)
