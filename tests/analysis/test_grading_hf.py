"""End to end with a real model: SmolLM2-135M (hf engine, fp32, greedy) answers real GSM8K
questions through a real worker, baseline and n-gram; the worker grades them while computing the
comparison. Greedy speculative decoding is lossless, so correctness must agree request by request."""

from __future__ import annotations

import json

import pytest

from console.analysis.grading import grade, reference_of
from console.analysis.selectors import comparison_for_experiment, comparison_state
from console.experiments.models import Experiment, Run
from console.experiments.services import experiment_create, experiment_start
from console.results.models import RequestResult
from console.traces.models import TraceRequest
from tests.conftest import wait_for
from tests.experiments.factories import trace_make

pytestmark = [pytest.mark.model, pytest.mark.django_db(transaction=True)]
MODEL = "smollm2-135m"
N = 3


@pytest.mark.worker
def test_it_grades_baseline_and_ngram_alike_on_real_gsm8k(celery_worker_proc, shared_data):
    from workers.catalog.resolve import model_fetch

    model_fetch(name=MODEL, progress=False)
    rows = [json.loads(line) for line in (shared_data / "prompts/gsm8k/test.first300_filtered.jsonl").open()][:N]
    prompts = [f"Question: {r['question']}\nAnswer:" for r in rows]
    trace = trace_make(name="gsm8k3", prompts=prompts, max_tokens=32, tasks=["math"] * N)
    for i, r in enumerate(rows):
        TraceRequest.objects.filter(trace=trace, request_id=f"r{i}").update(
            metadata={"reference_answer": r["answer"].rsplit("####", 1)[1].strip()}
        )
    experiment = experiment_create(
        name="hf graded",
        trace=trace,
        engine="hf",
        target_model=MODEL,
        candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}],
        load_levels="1x",
        repeats=1,
        warmup=1,
        sampling="greedy",
    )
    experiment_start(experiment=experiment)
    wait_for(lambda: Experiment.objects.get(pk=experiment.pk).status != "running", timeout=1200, what="experiment end")
    runs = list(Run.objects.filter(experiment=experiment).select_related("arm"))
    assert all(r.status == "done" for r in runs), [(r.arm.label, r.status, r.error) for r in runs]
    wait_for(lambda: comparison_state(experiment=experiment) == "ready", timeout=300, what="comparison computed")
    summary = comparison_for_experiment(experiment=experiment)
    correctness = summary["correctness"]
    rates = {r["arm"]: r for r in correctness["rates"]}
    assert set(rates) == {"baseline", "ngram k=3"}
    assert all(r["gradable"] == N and r["task"] == "math" for r in rates.values())
    assert rates["baseline"]["correct"] == rates["ngram k=3"]["correct"]
    (count,) = correctness["counts"]
    assert count["check"] == "correct" and count["n_applicable"] == N
    assert count["regressions"] == count["improvements"] == 0
    # Request by request, graded again here from the stored outputs.
    graded: dict[str, dict[str, bool | None]] = {}
    for result in RequestResult.objects.filter(run__in=runs).select_related("run__arm", "trace_request"):
        ref = reference_of(result.trace_request.metadata)
        assert ref is not None and not result.error
        graded.setdefault(result.run.arm.label, {})[result.request_id] = grade(result.output_text, ref)[0]
    assert graded["baseline"] == graded["ngram k=3"] and len(graded["baseline"]) == N
