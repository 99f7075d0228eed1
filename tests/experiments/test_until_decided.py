"""Run until decided (issue 23): the option refused with a 400 naming its field (form and API),
the plan fixed before it runs, the loop after each comparison refresh (a decided stop recorded
with its reason, a continue that adds exactly one repeat even when two loops race, a budget
stop), the gate reading the primary endpoint at the looks' adjusted level, and the page saying
why it stopped. Runs are finished by the test as a worker would (claim, store rows): no model,
no worker; each experiment is 60 requests, its comparison 300 bootstrap replicates."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from django.db import connection

from console import numbers
from console.analysis import sequential_looks
from console.analysis.comparison.derive import derive
from console.analysis.selectors import comparison_summary_for_experiment
from console.analysis.sequential_looks import experiment_sequential_advance, primary_intervals
from console.analysis.services import comparison_refresh
from console.decisions import gate
from console.decisions.gate.latency import criterion_latency_benefit
from console.decisions.services import decision_create
from console.experiments.models import Experiment, Run
from console.experiments.runs import run_claim
from console.experiments.services import (
    ExperimentInvalid,
    experiment_clone,
    experiment_create,
    experiment_start,
)
from console.results.models import RequestResult
from console.results.selectors import results_frames
from console.results.services import results_store
from tests.experiments.factories import trace_make
from tests.test_page_numbers import findings, visible_text
from workers.tasks import compute_comparison

NOWHERE = "http://127.0.0.1:9/v1"  # nothing listens there: the test plays the worker
N_REQUESTS = 60  # p95 needs 40 requests of the promised class
N_BOOT = 300
ENDPOINTS = {"primary_metric": "tpot_s", "primary_stat": "p95"}
CANDIDATE = "ngram k=2"


@pytest.fixture(autouse=True)
def _nowhere_registered(openai_register):
    openai_register(NOWHERE)


def _create(
    *, until_decided, repeats=2, endpoints=ENDPOINTS, loads="1x", name="until", **kwargs
) -> Experiment:
    return experiment_create(
        name=name,
        trace=trace_make(name=name, prompts=[f"p{i}" for i in range(N_REQUESTS)]),
        engine="openai",
        target_model="scripted",
        baseline_engine_args={"base_url": NOWHERE, "endpoint": "completions"},
        candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
        load_levels=loads,
        repeats=repeats,
        warmup=0,
        endpoints=endpoints,
        until_decided=until_decided,
        **kwargs,
    )


def _finish(run: Run, *, factor: float) -> None:
    """Play the worker: claim ``run`` and store its requests. Each request has its own pace (the
    same in every run: request-level difficulty), 2% run-to-run noise, and the candidate decodes
    at ``factor`` times the baseline's inter-token gap."""
    token = run_claim(run_id=run.pk, worker="test")
    assert token
    rng = np.random.default_rng(1000 * run.repeat + 7 * run.arm.position + 1)
    speed = 1.0 if run.arm.is_baseline else factor
    rows = []
    for i, request in enumerate(run.experiment.trace.requests.order_by("position")):
        gap = 0.02 * (1 + (i % 7) * 0.3) * speed * (1 + 0.02 * rng.standard_normal())
        first = 0.1 * i + 0.05
        times = [first + gap * k for k in range(8)]
        rows.append(
            RequestResult(
                run_id=run.pk,
                trace_request=request,
                request_id=request.request_id,
                scheduled_s=0.1 * i,
                sent_s=0.1 * i,
                first_token_s=times[0],
                finish_s=times[-1],
                chunk_times=times,
                chunk_tokens=[1] * 8,
                num_output_tokens=8,
                finish_reason="length",
                # the candidate drafts 2 tokens a step and keeps one: evidence that it speculated
                drafted=[] if run.arm.is_baseline else [2] * 7,
                accepted=[] if run.arm.is_baseline else [1] * 7,
            )
        )
    assert results_store(run_id=run.pk, token=token, rows=rows, telemetry={"counters": {}}, wall_s=36.0)


def _finish_queued(experiment: Experiment, *, factor: float) -> None:
    for run in (
        experiment.runs.filter(status=Run.Status.QUEUED).select_related("arm", "experiment").order_by("order")
    ):
        _finish(run, factor=factor)
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.DONE


def _ran(*, factor: float, **kwargs) -> Experiment:
    """An experiment run until decided whose first batch has finished and been compared."""
    experiment = _create(**kwargs)
    experiment_start(experiment=experiment)
    _finish_queued(experiment, factor=factor)
    assert comparison_refresh(experiment_id=experiment.pk, n_boot=N_BOOT) is not None
    return experiment


# --- the option ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        ("eight", {}, "until_decided: a JSON object"),
        ({}, {}, None),  # {} is off
        ({"max_repeats": 1}, {}, "until_decided.max_repeats: at least the first batch of repeats (2)"),
        ({"max_repeats": 51}, {}, "until_decided.max_repeats: a whole number from 1 to 50"),
        ({"max_repeats": 4.0}, {}, "until_decided.max_repeats: a whole number"),
        ({"max_repeats": True}, {}, "until_decided.max_repeats: a whole number"),
        ({"max_repeats": 4, "margin_s": -0.1}, {}, "until_decided.margin_s: seconds from 0"),
        ({"max_repeats": 4, "margin_s": float("nan")}, {}, "until_decided.margin_s"),
        ({"max_repeats": 4, "margin_s": float("inf")}, {}, "until_decided.margin_s"),
        ({"max_repeats": 4, "max_runs": 0}, {}, "until_decided.max_runs: a whole number from 1"),
        ({"max_repeats": 4, "max_runs": 3}, {}, "until_decided.max_runs: the first batch alone is 4 runs"),
        (
            {"max_repeats": 4, "max_accelerator_hours": 0},
            {},
            "until_decided.max_accelerator_hours: a number above 0",
        ),
        (
            {"max_repeats": 4, "max_accelerator_hours": float("inf")},
            {},
            "until_decided.max_accelerator_hours",
        ),
        ({"max_repeats": 4, "evil": [[[]]]}, {}, "until_decided.evil: unknown key"),
        ({"max_repeats": 4}, {"endpoints": None}, "until_decided: declare the primary endpoint"),
        (
            {"max_repeats": 4},
            {"endpoints": {"alpha": 0.5, **ENDPOINTS}},
            "alpha (0.5) must be between 0 and 0.5",
        ),
    ],
)
@pytest.mark.django_db
def test_it_refuses_a_bad_option_naming_the_field_and_stores_nothing(value, kwargs, message):
    before = Experiment.objects.count()
    if message is None:
        assert _create(until_decided=value, **kwargs).until_decided == {}
        return
    with pytest.raises(ExperimentInvalid) as info:
        _create(until_decided=value, **kwargs)
    assert any(message in m for m in info.value.errors["until_decided"]), info.value.errors
    assert Experiment.objects.count() == before


@pytest.mark.django_db
def test_it_fixes_the_plan_before_the_first_run():
    experiment = _create(until_decided={"max_repeats": 6, "margin_s": 0.002, "max_runs": 40}, loads="1x,2x")
    plan = experiment.until_decided
    # K = 6 - 2 + 1 = 5 looks, m = 1 candidate x 2 loads
    assert plan["first_look"] == 2 and plan["endpoints"] == 2
    assert plan["level"] == pytest.approx(1 - 0.05 / (5 * 2))
    assert (plan["metric"], plan["stat"], plan["looks"]) == ("tpot_s", "p95", [])
    assert experiment.runs.count() == 2 * 2 * 2  # only the first batch


@pytest.mark.django_db
def test_a_clone_declares_the_same_plan_with_the_first_batch_again():
    experiment = _ran(factor=1.0, until_decided={"max_repeats": 4, "max_runs": 10})
    experiment_sequential_advance(experiment_id=experiment.pk)  # continue: 3 repeats now
    clone = experiment_clone(experiment=Experiment.objects.get(pk=experiment.pk))
    assert clone.repeats == 2 and clone.runs.count() == 4
    assert {k: clone.until_decided[k] for k in ("max_repeats", "max_runs", "margin_s")} == {
        "max_repeats": 4,
        "max_runs": 10,
        "margin_s": None,
    }
    assert clone.until_decided["looks"] == [] and "stop" not in clone.until_decided


def _new_form(**fields) -> dict:
    base = {
        "name": "until form",
        "engine": "openai",
        "target_model": "scripted",
        "split": "all",
        "baseline_engine_args": json.dumps({"base_url": NOWHERE, "endpoint": "completions"}),
        "candidates": '[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}]',
        "load_levels": "1x",
        "sampling": "trace",
        "repeats": "2",
        "warmup": "0",
        "cost_per_hour_usd": "1",
        "promised_class": "interactive",
        "primary_metric": "tpot_s:p95",
        "success_metric": "success",
        "scheduling": "parallel",
        "until_decided": "on",
        "until_max_repeats": "5",
    }
    return base | fields


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"until_max_repeats": "1"}, "until_max_repeats", "at least the first batch of repeats (2)"),
        ({"until_max_repeats": ""}, "until_max_repeats", "the most repeats it may run"),
        ({"until_margin_s": "-1"}, "until_margin_s", "greater than or equal to 0"),
        ({"until_max_runs": "0"}, "until_max_runs", "greater than or equal to 1"),
        ({"until_max_accelerator_hours": "0"}, "until_max_accelerator_hours", "a number above 0"),
        ({"until_max_accelerator_hours": "inf"}, "until_max_accelerator_hours", "Enter a number"),
        ({"primary_metric": ""}, "primary_metric", "declare one"),
    ],
)
@pytest.mark.django_db
def test_the_form_shows_what_is_wrong_beside_the_field(engineer_client, fields, field, message):
    trace = trace_make(name="form", prompts=["a", "b"])
    before = Experiment.objects.count()
    page = engineer_client.post("/experiments/new/", _new_form(trace=str(trace.pk), **fields))
    assert page.status_code == 200
    errors = page.context["form"].errors
    assert any(message in e for e in errors.get(field, [])), errors
    assert Experiment.objects.count() == before


@pytest.mark.django_db
def test_the_form_stores_the_option_with_repeats_as_the_first_batch(engineer_client):
    trace = trace_make(name="form ok", prompts=["a", "b"])
    page = engineer_client.post(
        "/experiments/new/", _new_form(trace=str(trace.pk), until_margin_s="0.004", until_max_runs="20")
    )
    assert page.status_code == 302, page.context["form"].errors if page.context else page
    experiment = Experiment.objects.get(name="until form")
    assert experiment.until_decided["max_repeats"] == 5 and experiment.until_decided["margin_s"] == 0.004
    assert experiment.until_decided["max_runs"] == 20 and experiment.repeats == 2


@pytest.mark.parametrize(
    ("until", "endpoints", "where"),
    [
        ({"max_repeats": 1}, ENDPOINTS, "until_decided"),
        ({"max_repeats": 4}, None, "until_decided"),
        ({"max_repeats": 4, "margin_s": -1}, ENDPOINTS, "margin_s"),
        ({"max_repeats": 4, "max_runs": 0}, ENDPOINTS, "max_runs"),
        ({"max_repeats": 4, "max_accelerator_hours": 0}, ENDPOINTS, "max_accelerator_hours"),
        ({"max_repeats": 4, "max_accelerator_hours": 1e300}, ENDPOINTS, "max_accelerator_hours"),
        ({"max_repeats": 4.5}, ENDPOINTS, "max_repeats"),
        ({"max_repeats": 4, "extra": 1}, ENDPOINTS, "extra"),
        ({"margin_s": 0.1}, ENDPOINTS, "max_repeats"),
    ],
)
@pytest.mark.django_db
def test_the_api_answers_a_bad_option_with_a_400_naming_the_field(engineer_client, until, endpoints, where):
    trace = trace_make(name="api", prompts=["a", "b"])
    body = {
        "trace": trace.pk,
        "start": False,
        "engine": "openai",
        "target_model": "scripted",
        "baseline_engine_args": {"base_url": NOWHERE, "endpoint": "completions"},
        "candidates": [{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
        "repeats": 2,
        "until_decided": until,
    }
    if endpoints:
        body["endpoints"] = endpoints
    response = engineer_client.post("/api/experiments", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert where in response.content.decode()
    assert not Experiment.objects.exists()
    body["until_decided"] = {"max_repeats": 4, "margin_s": 0.003}
    body["endpoints"] = ENDPOINTS
    created = engineer_client.post("/api/experiments", body, content_type="application/json")
    assert created.status_code == 201, created.content
    assert created.json()["until_decided"]["level"] == pytest.approx(1 - 0.05 / 3)


# --- the loop ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_look_at_95_percent_gives_the_stored_interval_digit_for_digit():
    experiment = _ran(factor=0.6, until_decided={"max_repeats": 4})
    data = comparison_summary_for_experiment(experiment=experiment)
    runs = list(experiment.runs.filter(status="done").select_related("arm", "experiment"))
    requests, _ = results_frames(runs=runs)
    derived, *_ = derive(requests, base_arm="baseline", deadlines=experiment.deadlines)
    ends = data.endpoints.model_dump()
    at95 = primary_intervals(derived, base_arm="baseline", endpoints=ends, level=0.95, n_boot=N_BOOT, seed=0)
    wider = primary_intervals(derived, base_arm="baseline", endpoints=ends, level=0.99, n_boot=N_BOOT, seed=0)
    stored = next(p for p in data.primary if p.metric == "tpot_s" and p.stat == "p95")
    got = at95[(CANDIDATE, "1x")]
    assert (got["delta_lo"], got["delta_hi"]) == pytest.approx((stored.delta_lo, stored.delta_hi), rel=1e-12)
    assert (
        wider[(CANDIDATE, "1x")]["delta_lo"]
        < got["delta_lo"]
        < got["delta_hi"]
        < wider[(CANDIDATE, "1x")]["delta_hi"]
    )


@pytest.mark.django_db
def test_a_decided_endpoint_stops_it_with_its_reason_and_adds_no_run():
    experiment = _ran(factor=0.6, until_decided={"max_repeats": 4})
    runs = experiment.runs.count()
    assert experiment_sequential_advance(experiment_id=experiment.pk) == "stopped: better"
    experiment.refresh_from_db()
    stop = experiment.until_decided["stop"]
    assert (stop["outcome"], stop["repeats"], stop["looks"], stop["budget"]) == ("better", 2, 1, None)
    assert "better after 2 repeats: the 98.33% interval" in stop["reason"]
    (endpoint,) = stop["endpoints"]
    assert endpoint["arm"] == CANDIDATE and endpoint["hi"] < -endpoint["noise_floor"] < 0
    (look,) = experiment.until_decided["looks"]
    assert look["level"] == pytest.approx(1 - 0.05 / 3) and look["endpoints"][0]["outcome"] == "better"
    assert experiment.runs.count() == runs and experiment.repeats == 2
    assert experiment_sequential_advance(experiment_id=experiment.pk) == "stopped already"


@pytest.mark.django_db(transaction=True)
def test_a_continue_adds_exactly_one_repeat_once_when_two_loops_race(monkeypatch):
    experiment = _ran(factor=1.0, until_decided={"max_repeats": 4})  # A/A: undecided, no margin
    runs_before = experiment.runs.count()
    # Both loops read the experiment (done, 2 repeats, no look) before either writes.
    barrier = threading.Barrier(2, timeout=60)
    real = sequential_looks.until_decided_spent

    def both_looked(*, experiment):
        barrier.wait()
        return real(experiment=experiment)

    monkeypatch.setattr(sequential_looks, "until_decided_spent", both_looked)
    said: list[str] = []

    def loop() -> None:
        try:
            said.append(experiment_sequential_advance(experiment_id=experiment.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=loop) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(said) == ["added repeat 3 (2 runs)", "another loop added the repeat"], said
    experiment.refresh_from_db()
    assert experiment.repeats == 3 and experiment.status == Experiment.Status.RUNNING
    added = list(experiment.runs.filter(repeat=2).select_related("arm"))
    assert len(added) == 2 and experiment.runs.count() == runs_before + 2
    assert {r.arm.label for r in added} == {"baseline", CANDIDATE}
    assert all(r.status == "queued" and r.celery_task_id and r.enqueued_at for r in added)  # sent on commit
    assert min(r.order for r in added) > max(r.order for r in experiment.runs.filter(repeat__lt=2))
    (look,) = experiment.until_decided["looks"]
    assert (look["repeats"], look["outcome"]) == (2, "continue")
    assert "stop" not in experiment.until_decided


@pytest.mark.django_db
def test_a_lockstep_experiment_gets_its_added_repeat_one_run_at_a_time():
    experiment = _ran(factor=1.0, until_decided={"max_repeats": 3}, scheduling="lockstep")
    assert experiment_sequential_advance(experiment_id=experiment.pk) == "added repeat 3 (2 runs)"
    added = list(experiment.runs.filter(repeat=2).order_by("order"))
    assert [bool(r.celery_task_id) for r in added] == [True, False]  # the next one when it ends


@pytest.mark.django_db
def test_it_stops_undecided_when_the_run_budget_is_spent(viewer_client):
    experiment = _ran(factor=1.0, until_decided={"max_repeats": 4, "max_runs": 5})
    assert experiment_sequential_advance(experiment_id=experiment.pk) == "stopped: undecided"
    experiment.refresh_from_db()
    stop = experiment.until_decided["stop"]
    assert (stop["outcome"], stop["budget"], stop["runs"]) == ("undecided", "runs", 4)
    assert "would pass the budget of 5 runs" in stop["reason"]
    assert experiment.runs.count() == 4
    text = visible_text(viewer_client.get(f"/experiments/{experiment.pk}/").content.decode())
    assert "Stopped after 2 of at most 4 repeats: budget of 5 runs spent, undecided" in " ".join(text.split())


@pytest.mark.django_db
def test_it_decides_equivalence_inside_the_declared_margin_and_keeps_looking_without_one():
    experiment = _ran(factor=1.0, until_decided={"max_repeats": 4, "margin_s": 0.01})
    assert experiment_sequential_advance(experiment_id=experiment.pk) == "stopped: equivalent"
    stop = Experiment.objects.get(pk=experiment.pk).until_decided["stop"]
    (endpoint,) = stop["endpoints"]
    assert -0.01 < endpoint["lo"] < endpoint["hi"] < 0.01


@pytest.mark.django_db
def test_the_comparison_task_looks_once_it_has_refreshed():
    experiment = _create(until_decided={"max_repeats": 3})
    experiment_start(experiment=experiment)
    _finish_queued(experiment, factor=0.6)
    # the task's body, in this process (its default 5,000 replicates)
    assert compute_comparison(experiment_id=experiment.pk) == "computed; stopped: better"
    assert compute_comparison(experiment_id=experiment.pk) == "computed; stopped already"


@pytest.mark.django_db
def test_it_does_not_look_until_every_run_of_the_batch_is_done():
    experiment = _create(until_decided={"max_repeats": 4})
    experiment_start(experiment=experiment)
    first = experiment.runs.select_related("arm", "experiment").order_by("order").first()
    _finish(first, factor=1.0)
    assert (
        experiment_sequential_advance(experiment_id=experiment.pk)
        == "no look while the experiment is running"
    )
    assert Experiment.objects.get(pk=experiment.pk).until_decided["looks"] == []


# --- the gate and the page -------------------------------------------------------------------


@pytest.mark.django_db
def test_the_gate_reads_the_primary_endpoint_at_the_adjusted_level(engineer):
    experiment = _ran(factor=0.6, until_decided={"max_repeats": 4})
    experiment_sequential_advance(experiment_id=experiment.pk)
    experiment.refresh_from_db()
    (look,) = experiment.until_decided["looks"]
    adjusted = look["endpoints"][0]
    summary = comparison_summary_for_experiment(experiment=experiment)
    stored = next(p for p in summary.primary if p.metric == "tpot_s")
    assert adjusted["lo"] < stored.delta_lo and stored.delta_hi < adjusted["hi"]  # wider than 95%
    candidate = experiment.arms.get(label=CANDIDATE)
    decision = decision_create(
        experiment=experiment, author=engineer, title="on", proposal="enable", candidate_arm=candidate,
        traffic_class="interactive", comparison=summary,
    )  # fmt: skip
    criterion = next(c for c in decision.gate["criteria"] if c["key"] == "latency_benefit")
    row = next(n for n in criterion["numbers"] if "(primary" in n["label"])
    assert "run until decided: 98.3% interval" in row["label"]
    assert row["value"][3:5] == [adjusted["lo"], adjusted["hi"]]
    assert criterion["status"] == "pass"
    keep_off = decision_create(
        experiment=experiment, author=engineer, title="off", proposal="keep_off", candidate_arm=None,
        traffic_class="interactive", comparison=summary,
    )  # fmt: skip
    assert keep_off.gate["facts"]["candidates"][CANDIDATE]["sequential"]["repeats"] == 2
    facts = decision.gate["facts"]
    # The same 95% row, its adjusted interval straddling zero: not better, whatever 95% says.
    facts["sequential"]["rows"][0] |= {"delta_lo": adjusted["lo"], "delta_hi": abs(adjusted["lo"])}
    assert (
        criterion_latency_benefit(facts, gate.DEFAULT_SETTINGS, traffic_class="interactive")["status"]
        == "fail"
    )
    # A comparison no look is of: the primary endpoint is not measured, never read at 95%.
    gate.gate_sequential_attach(facts, until_decided=experiment.until_decided, comparison_key="another")
    judged = criterion_latency_benefit(facts, gate.DEFAULT_SETTINGS, traffic_class="interactive")
    assert judged["status"] == "not_measured" and "no look at the adjusted level" in judged["summary"]
    # Not run until decided: the 95% row, as before.
    gate.gate_sequential_attach(facts, until_decided={}, comparison_key=summary.key)
    plain = criterion_latency_benefit(facts, gate.DEFAULT_SETTINGS, traffic_class="interactive")
    assert next(n for n in plain["numbers"] if "(primary)" in n["label"])["value"][3] == stored.delta_lo


def _said(client, experiment: Experiment) -> str:
    """The page's visible text, checked for what no page may show (tests/test_page_numbers.py)."""
    text = visible_text(client.get(f"/experiments/{experiment.pk}/").content.decode())
    allowed = {"interactive", "baseline", CANDIDATE}
    assert findings(text, allowed) == [], findings(text, allowed)
    return " ".join(text.split())


@pytest.mark.django_db
def test_the_page_shows_the_plan_and_each_look_while_it_continues(viewer_client):
    experiment = _ran(factor=1.0, until_decided={"max_repeats": 4, "max_accelerator_hours": 2.5})
    before = _said(viewer_client, experiment)
    assert "First look after 2 repeats; at most 3 looks" in before
    assert "each look's interval at 98.3% (alpha 0.05 shared by 3 looks × 1 endpoint)" in before
    assert "Equivalence margin: none (no equivalence decision). Budget: 2.50 accelerator-hours." in before
    experiment_sequential_advance(experiment_id=experiment.pk)  # A/A: continue, a third repeat
    after = _said(viewer_client, experiment)
    assert "Look 1 of at most 3: continue (3 of at most 4 repeats)" in after
    assert "Interval (98.3%, look at 2 repeats)" in after and "undecided" in after


@pytest.mark.django_db
def test_the_page_says_why_it_stopped(viewer_client):
    experiment = _ran(factor=0.6, until_decided={"max_repeats": 4})
    experiment_sequential_advance(experiment_id=experiment.pk)
    (endpoint,) = Experiment.objects.get(pk=experiment.pk).until_decided["stop"]["endpoints"]
    text = _said(viewer_client, experiment)
    lo, hi, floor = (numbers.duration(endpoint[k]) for k in ("lo", "hi", "noise_floor"))
    assert (
        f"Stopped after 2 of at most 4 repeats: candidate {CANDIDATE} better on TPOT p95 at 1x "
        f"(2-repeat look, 98.3% interval [{lo}, {hi}] beyond the noise floor ±{floor})"
    ) in text
