"""The issue's acceptance run: baseline, an n-gram sweep of two lengths and a draft-model arm,
on a small real trace, through a real worker running the real hf engine on the CPU."""

from __future__ import annotations

import json

import pytest

from console.experiments.models import Experiment, Run
from console.experiments.services import ExperimentInvalid, experiment_create, experiment_start
from console.results.models import RequestResult
from tests.conftest import wait_for
from tests.experiments.factories import trace_make

pytestmark = [pytest.mark.model, pytest.mark.django_db(transaction=True)]
MODEL = "smollm2-135m"


def _real_prompts(shared_data, n: int = 4) -> list[str]:
    humaneval = [
        json.loads(line)["prompt"] for line in (shared_data / "prompts/humaneval/HumanEval.jsonl").open()
    ]
    gsm8k = [
        json.loads(line)["question"]
        for line in (shared_data / "prompts/gsm8k/test.first300_filtered.jsonl").open()
    ]
    return [humaneval[0], gsm8k[0], humaneval[1], gsm8k[1]][:n]


@pytest.mark.worker
def test_it_runs_baseline_ngram_sweep_and_draft_model_through_the_worker(celery_worker_proc, shared_data):
    from workers.catalog.resolve import model_fetch

    model_fetch(name=MODEL, progress=False)
    trace = trace_make(
        name="real4", prompts=_real_prompts(shared_data), arrivals=[0.0, 0.2, 0.4, 0.6], max_tokens=16
    )
    experiment = experiment_create(
        name="hf matrix",
        trace=trace,
        engine="hf",
        target_model=MODEL,
        candidates=[
            {"speculative_config": {"method": "ngram", "num_speculative_tokens": [2, 4]}},
            {"speculative_config": {"method": "draft_model", "model": MODEL, "num_speculative_tokens": 3}},
        ],
        load_levels="1x",
        repeats=1,
        warmup=1,
        sampling="greedy",
    )
    assert [a.label for a in experiment.arms.order_by("position")] == [
        "baseline",
        "ngram k=2",
        "ngram k=4",
        f"draft_model({MODEL}) k=3",
    ]
    experiment_start(experiment=experiment)
    wait_for(
        lambda: Experiment.objects.get(pk=experiment.pk).status != "running",
        timeout=1200,
        what="experiment end",
    )
    runs = list(Run.objects.filter(experiment=experiment).select_related("arm").order_by("order"))
    assert all(r.status == "done" for r in runs), [(r.arm.label, r.status, r.error) for r in runs]
    assert [r.order for r in runs] == list(range(4))
    outputs = {}
    for run in runs:
        rows = {r.request_id: r for r in RequestResult.objects.filter(run=run)}
        assert sorted(rows) == ["r0", "r1", "r2", "r3"]
        assert [round(rows[k].scheduled_s, 6) for k in sorted(rows)] == [0.0, 0.2, 0.4, 0.6]
        for row in rows.values():
            assert not row.error and row.num_output_tokens > 0 and row.chunk_times == sorted(row.chunk_times)
            if not run.arm.is_baseline:
                assert len(row.drafted) == len(row.accepted) > 0
                assert all(0 <= a <= d for a, d in zip(row.accepted, row.drafted, strict=True))
        outputs[run.arm.label] = {k: rows[k].output_token_ids for k in rows}
        assert run.versions.get("transformers")
    # Greedy speculative decoding is lossless: every arm wrote the baseline's tokens.
    for label, out in outputs.items():
        assert out == outputs["baseline"], label


@pytest.mark.parametrize(
    "candidate,field_fragment",
    [
        ({"speculative_config": {"method": "eagle", "num_speculative_tokens": 2}}, "not supported"),
        ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 0}}, ">= 1"),
        (
            {
                "engine": "vllm",
                "speculative_config": {"method": "draft_model", "model": MODEL, "num_speculative_tokens": 2},
            },
            "same engine",
        ),
        (
            {
                "speculative_config": {
                    "method": "draft_model",
                    "model": "no-such-model",
                    "num_speculative_tokens": 2,
                }
            },
            "no-such-model",
        ),
    ],
)
def test_it_rejects_invalid_configs_at_save_time_with_field_errors(candidate, field_fragment):
    trace = trace_make(name="t", prompts=["hello"])
    with pytest.raises(ExperimentInvalid) as info:
        experiment_create(name="bad", trace=trace, engine="hf", target_model=MODEL, candidates=[candidate])
    assert "candidates.0" in info.value.errors
    assert field_fragment in " ".join(info.value.errors["candidates.0"])
    assert not Experiment.objects.filter(name="bad").exists()


def test_it_rejects_a_missing_target_model_naming_the_fetch_command():
    trace = trace_make(name="t", prompts=["hello"])
    with pytest.raises(ExperimentInvalid) as info:
        experiment_create(
            name="bad",
            trace=trace,
            engine="hf",
            target_model="/nowhere/model.gguf",
            candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
        )
    assert "baseline" in info.value.errors
