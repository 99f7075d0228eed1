"""The fit assessment from stored data: the experiment page, the API, the decision checklist,
and the worker caching a finished baseline run's fit facts (console.analysis.fit_stats)."""

from __future__ import annotations

import json

import pytest

from console.results.models import RunSummary
from console.traces.models import TraceRequest

pytestmark = pytest.mark.django_db


def _synthetic(**kwargs):
    from tests.support.synthetic import experiment_synthesize

    return experiment_synthesize(n_requests=24, ks=(2,), loads="1x,2x", repeats=1, **kwargs)


def _summarise(experiment) -> None:
    from console.analysis.services import fit_runs_summarise

    fit_runs_summarise(experiment=experiment)  # what the worker does as each baseline run ends


def test_it_shows_the_assessment_before_any_run_and_never_computes_on_a_get(viewer_client):
    experiment = _synthetic()
    page = viewer_client.get(f"/experiments/{experiment.pk}/")
    html = page.content.decode()
    assert page.status_code == 200 and "Fit assessment" in html
    # Finished baseline runs without cached facts: the trace-side verdicts, and a note.
    assert "judged before any run" in html and "2 finished baseline run(s) not summarised yet" in html
    assert not RunSummary.objects.exists()
    for name in ("quality_bar", "output_length", "serving_headroom", "interactive_traffic", "proposer"):
        assert f'id="fit-{name}"' in html
    # max_tokens 64 on every request: all of them reach the 64-token mark, by their limits.
    assert "by output limits" in html


def test_it_refines_the_assessment_from_the_baselines_stored_results(viewer_client):
    experiment = _synthetic()
    _summarise(experiment)
    assert RunSummary.objects.filter(run__arm__is_baseline=True).count() == 2
    assert not RunSummary.objects.filter(run__arm__is_baseline=False).exists()
    body = viewer_client.get(f"/api/experiments/{experiment.pk}").json()
    fit = body["fit_assessment"]
    assert fit["stage"] == "after 2 baseline run(s)" and fit["pending_runs"] == 0
    conditions = {c["name"]: c for c in fit["conditions"]}
    assert set(conditions) == {
        "quality_bar", "output_length", "serving_headroom", "interactive_traffic", "proposer", "drafter_acceptance"
    }  # fmt: skip
    # The synthetic outputs have 8..63 tokens: none reaches 64.
    length = conditions["output_length"]
    assert length["numbers"]["source"] == "baseline outputs" and length["verdict"] == "unlikely"
    assert length["numbers"]["n"] == 48
    assert conditions["quality_bar"]["verdict"] == "unknown" and "nothing is gradable" in conditions["quality_bar"]["reason"]
    serving = conditions["serving_headroom"]
    assert serving["verdict"] == "unknown" and "server" in serving["reason"]
    traffic = conditions["interactive_traffic"]
    assert traffic["numbers"]["classes"] == {"interactive": 18, "batch": 6}
    assert {lv["load"] for lv in traffic["numbers"]["loads"]} == {"1x", "2x"}
    assert all(lv["inflight_mean"] is not None for lv in traffic["numbers"]["loads"])
    # 'synthetic' is no catalog model, but its candidate is n-gram: a proposer whatever the target.
    assert conditions["proposer"]["verdict"] == "likely"
    shares = {g["traffic_class"]: g for g in fit["generation_share"]}
    assert set(shares) == {"interactive", "batch"} and shares["interactive"]["n"] == 36
    assert 0.5 < shares["interactive"]["median"] <= 1 and shares["interactive"]["warning"] is None
    # The list endpoint and the CLI's progress payload stay light: no assessment there.
    assert "fit_assessment" not in viewer_client.get("/api/experiments").json()[0]
    schema = viewer_client.get("/api/openapi.json").json()["components"]["schemas"]
    assert "FitAssessmentOut" in schema and "fit_assessment" in schema["ExperimentOut"]["properties"]


def test_it_warns_when_external_time_leaves_generation_under_half(viewer_client):
    experiment = _synthetic()
    interactive = TraceRequest.objects.filter(trace=experiment.trace, traffic_class="interactive")
    for tr in interactive:
        tr.metadata = {"retrieval_s": 30.0, "tool_s": 10.0}
        tr.save(update_fields=["metadata"])
    _summarise(experiment)
    fit = viewer_client.get(f"/api/experiments/{experiment.pk}").json()["fit_assessment"]
    shares = {g["traffic_class"]: g for g in fit["generation_share"]}
    assert shares["interactive"]["median"] < 0.1 and shares["interactive"]["includes_external_time"]
    assert "cannot move end-to-end latency much" in shares["interactive"]["warning"]
    assert shares["batch"]["warning"] is None
    html = viewer_client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert 'class="notice fit-warning">generation is' in html and "for interactive (median)" in html
    assert "includes the external time" in html


def test_it_grades_reference_answers_and_judges_the_quality_bar(viewer_client):
    from console.results.models import RequestResult

    experiment = _synthetic()
    math = TraceRequest.objects.filter(trace=experiment.trace, task="math")
    for tr in math:
        tr.metadata = {"reference_answer": "72"}
        tr.save(update_fields=["metadata"])
    RequestResult.objects.filter(trace_request__in=math).update(output_text="... so she sold 72 clips")
    _summarise(experiment)
    fit = viewer_client.get(f"/api/experiments/{experiment.pk}").json()["fit_assessment"]
    quality = next(c for c in fit["conditions"] if c["name"] == "quality_bar")
    n = 2 * math.count()
    assert quality["verdict"] == "likely" and quality["numbers"]["by_check"]["reference_answer"] == {
        "gradable": n,
        "passed": n,
    }


def test_it_lists_the_conditions_in_the_decision_checklist(engineer, engineer_client):
    from console.decisions import checklist
    from tests.decisions.conftest import draft_make
    from tests.decisions.factories import experiment_make

    experiment = experiment_make(created_by=engineer)
    decision = draft_make(experiment=experiment, author=engineer)
    fit_items = [i for i in decision.checklist if i.get("section") == checklist.FIT_SECTION]
    assert [i["key"] for i in fit_items] == [
        "fit_quality_bar",
        "fit_output_length",
        "fit_serving_headroom",
        "fit_interactive_traffic",
        "fit_proposer",
        "fit_drafter_acceptance",
    ]
    assert all(i["answer"] in ("likely", "unlikely", "unknown") and i["detail"] for i in fit_items)
    # Evidence to read: never counted as unanswered, never offered as a question.
    assert not any(k.startswith("fit_") for k in checklist.checklist_unanswered(decision.checklist))
    page = engineer_client.get(f"/decisions/{decision.pk}/").content.decode()
    assert 'id="checklist-fit"' in page and "A compatible proposer exists for this engine and target" in page
    edit = engineer_client.get(f"/decisions/{decision.pk}/edit/")
    assert edit.status_code == 200 and "check_fit_" not in edit.content.decode()
    exported = engineer_client.get(f"/decisions/{decision.pk}/export.md")
    assert exported.status_code == 200
    assert "Fit: Outputs are long enough to amortise drafting" in exported.content.decode()


@pytest.mark.model
@pytest.mark.django_db(transaction=True)  # the run's heartbeat thread writes on its own connection
def test_it_caches_fit_facts_when_a_real_baseline_run_finishes(shared_data, viewer_client):
    """The smallest real model, the baseline run only, executed in-process as the worker does."""
    from console.experiments.services import experiment_create
    from tests.experiments.factories import trace_make
    from workers.catalog.resolve import model_fetch
    from workers.execution import run_execute

    model_fetch(name="smollm2-135m", progress=False)
    questions = [
        json.loads(line)["question"] for line in (shared_data / "prompts/gsm8k/test.first300_filtered.jsonl").open()
    ][:2]
    experiment = experiment_create(
        name="fit real",
        trace=trace_make(name="fit-real", prompts=questions, arrivals=[0.0, 0.1], max_tokens=8),
        engine="hf",
        target_model="smollm2-135m",
        candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
        load_levels="1x",
        repeats=1,
        warmup=0,
        sampling="greedy",
    )
    run = experiment.runs.get(arm__is_baseline=True)
    assert run_execute(run_id=run.pk) == "done"
    facts = RunSummary.objects.get(run=run).data["fit"]
    assert facts["n_completed"] == 2 and all(0 < t <= 8 for t in facts["output_tokens"])
    assert facts["gpu_util_pct"] is None  # this host has no GPU
    fit = viewer_client.get(f"/api/experiments/{experiment.pk}").json()["fit_assessment"]
    conditions = {c["name"]: c for c in fit["conditions"]}
    assert fit["stage"] == "after 1 baseline run(s)"
    assert conditions["output_length"]["verdict"] == "unlikely"  # 8-token limit < 64
    assert conditions["serving_headroom"]["verdict"] == "unknown" and "CPU" in conditions["serving_headroom"]["reason"]
    proposer = conditions["proposer"]
    assert proposer["numbers"]["tokenizer_family"] == "smollm2"
    assert [g["traffic_class"] for g in fit["generation_share"]] == ["interactive"]
