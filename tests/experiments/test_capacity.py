"""Capacity search as more runs: the option's validation, the first steps, the advance that adds
the next step when one finishes (idempotent, stopped by a cancel), the experiment done only when
every search ended; and the acceptance run on smollm2-135m through a real worker."""

from __future__ import annotations

import math

import pytest

from console.experiments.capacity_search import capacity_searches_advance
from console.experiments.models import Experiment, Run
from console.experiments.runs import experiment_status_refresh, run_claim
from console.experiments.services import (
    ExperimentInvalid,
    experiment_cancel,
    experiment_create,
    experiment_start,
)
from console.results.models import RequestResult
from console.results.services import results_store as run_finish
from tests.conftest import wait_for
from tests.experiments.factories import trace_make

NOWHERE = "http://127.0.0.1:9/v1"  # nothing listens there: these runs are finished by the test
SEARCH = {"slo": {"p95_e2e_s": 1.0}, "lo": 0.25, "hi": 16, "steps": 3}


@pytest.fixture(autouse=True)
def _nowhere_registered(openai_register):
    openai_register(NOWHERE)


def _create(*, capacity_search=SEARCH, repeats=1, loads="1x", name="cap", **kwargs) -> Experiment:
    return experiment_create(
        name=name,
        trace=trace_make(name=name, prompts=["a", "b", "c"]),
        engine="openai",
        target_model="scripted",
        baseline_engine_args={"base_url": NOWHERE, "endpoint": "completions"},
        candidates=[{"speculative_config": None, "label": "baseline A/A"}],
        load_levels=loads,
        repeats=repeats,
        warmup=0,
        capacity_search=capacity_search,
        **kwargs,
    )


def _finish(run: Run, *, e2e_s: float) -> None:
    """Play the worker: claim the run and store three requests that took ``e2e_s`` each."""
    token = run_claim(run_id=run.pk, worker="test")
    assert token
    requests = list(run.experiment.trace.requests.order_by("position"))
    rows = [
        RequestResult(
            run_id=run.pk,
            trace_request=r,
            request_id=r.request_id,
            scheduled_s=0.1 * i,
            sent_s=0.1 * i,
            first_token_s=0.1 * i + 0.01,
            finish_s=0.1 * i + e2e_s,
            chunk_times=[0.1 * i + 0.01, 0.1 * i + e2e_s],
            chunk_tokens=[1, 1],
            num_output_tokens=2,
            finish_reason="length",
        )
        for i, r in enumerate(requests)
    ]
    assert run_finish(run_id=run.pk, token=token, rows=rows, telemetry={"counters": {}, "samples": []}, wall_s=1.0)


def _steps(experiment: Experiment) -> list[Run]:
    return list(
        Run.objects.filter(experiment=experiment, capacity_step__isnull=False)
        .select_related("arm", "experiment")
        .order_by("arm__position", "repeat", "capacity_step")
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("fast", "capacity_search: a JSON object"),
        ([1, 2], "capacity_search: a JSON object"),
        ({"slo": {}}, "give at least one bound"),
        ({"slo": {"attainment": 1.5}}, "capacity_search.slo.attainment: a fraction"),
        ({"slo": {"attainment": True}}, "capacity_search.slo.attainment"),
        ({"slo": {"p95_tpot_s": float("nan")}}, "capacity_search.slo.p95_tpot_s"),
        ({"slo": {"p95_e2e_s": "1"}}, "capacity_search.slo.p95_e2e_s"),
        ({"slo": {"p95_e2e_s": -1}}, "capacity_search.slo.p95_e2e_s"),
        ({"slo": {"p95_e2e_s": 1, "traffic_class": "<script>"}}, "capacity_search.slo.traffic_class"),
        ({"slo": {"p95_e2e_s": 1, "evil": {"x": [[[]]]}}}, "capacity_search.slo.evil: unknown key"),
        ({"slo": {"p95_e2e_s": 1}, "lo": 0}, "capacity_search.lo"),
        ({"slo": {"p95_e2e_s": 1}, "hi": float("inf")}, "capacity_search.hi"),
        ({"slo": {"p95_e2e_s": 1}, "hi": 1e300}, "capacity_search.hi"),
        ({"slo": {"p95_e2e_s": 1}, "lo": 4, "hi": 2}, "hi (2) must be more than"),
        ({"slo": {"p95_e2e_s": 1}, "steps": 9}, "capacity_search.steps: an integer from 1 to 8"),
        ({"slo": {"p95_e2e_s": 1}, "steps": 0}, "capacity_search.steps"),
        ({"slo": {"p95_e2e_s": 1}, "steps": 2.5}, "capacity_search.steps"),
        ({"slo": {"p95_e2e_s": 1}, "extra": 1}, "capacity_search.extra: unknown key"),
    ],
)
@pytest.mark.django_db
def test_it_refuses_a_bad_capacity_search_naming_the_field_and_stores_nothing(value, message):
    before = Experiment.objects.count()
    with pytest.raises(ExperimentInvalid) as info:
        _create(capacity_search=value)
    assert any(message in m for m in info.value.errors["capacity_search"]), info.value.errors
    assert Experiment.objects.count() == before


@pytest.mark.django_db
def test_it_refuses_an_attainment_target_without_a_deadline_for_the_class():
    with pytest.raises(ExperimentInvalid) as info:
        _create(capacity_search={"slo": {"attainment": 0.99, "traffic_class": "batch"}}, deadlines={"interactive": {"e2e_s": 1}})
    assert "the batch class has no deadline" in info.value.errors["capacity_search"][0]


@pytest.mark.django_db
def test_it_fills_defaults_and_adds_a_first_step_per_arm_and_repeat_after_the_matrix():
    experiment = _create(capacity_search={"slo": {"attainment": 0.99}}, repeats=2, loads="1x,2x")
    assert experiment.capacity_search == {
        "slo": {"traffic_class": "interactive", "attainment": 0.99},
        "lo": 0.25,
        "hi": 16.0,
        "steps": 5,
    }
    runs = list(experiment.runs.select_related("arm").order_by("order"))
    matrix = [r for r in runs if r.capacity_step is None]
    steps = [r for r in runs if r.capacity_step is not None]
    assert len(matrix) == 2 * 2 * 2 and max(r.order for r in matrix) < min(r.order for r in steps)
    assert sorted((r.arm.label, r.repeat) for r in steps) == sorted(
        (a, rep) for a in ("baseline", "baseline A/A") for rep in (0, 1)
    )
    assert all(r.load_label == "cap-1" and r.rate_multiplier == pytest.approx(2.0) for r in steps)
    assert not _create(capacity_search=None, name="off").runs.filter(capacity_step__isnull=False).exists()


@pytest.mark.django_db
def test_it_refuses_partial_or_bad_load_weights():
    for loads, message in (
        ("1x=2,2x", "declare a weight on every load level or on none"),
        ("1x=0,2x=0", "sum to zero"),
        ("1x=-1", "between 0 and"),
        ("1x=abc", "is not a number"),
        ([{"rate_multiplier": 1, "weight": True}], "weight must be a number"),
    ):
        with pytest.raises(ExperimentInvalid) as info:
            _create(loads=loads, capacity_search=None)
        assert any(message in m for m in info.value.errors["load_levels"]), (loads, info.value.errors)
    experiment = _create(loads="1x=3,4x=1", capacity_search=None, name="weighted")
    assert [lv.get("weight") for lv in experiment.load_levels] == [3.0, 1.0]


@pytest.mark.django_db(transaction=True)
def test_it_bisects_step_by_step_until_the_budget_then_the_experiment_is_done():
    """Known truth: the baseline meets the SLO (p95 e2e <= 1 s) up to 3x, the A/A arm up to 1.5x."""
    truth = {"baseline": 3.0, "baseline A/A": 1.5}
    experiment = _create()
    experiment_start(experiment=experiment)
    for run in experiment.runs.filter(capacity_step__isnull=True):
        _finish(run, e2e_s=0.2)
    seen = 0
    while queued := list(Run.objects.filter(experiment=experiment, status="queued").select_related("arm", "experiment")):
        for run in queued:
            _finish(run, e2e_s=0.2 if run.rate_multiplier <= truth[run.arm.label] else 5.0)
            seen += 1
        assert seen < 20
    experiment.refresh_from_db()
    assert experiment.status == "done"
    steps = _steps(experiment)
    by_arm: dict[str, list[Run]] = {}
    for run in steps:
        by_arm.setdefault(run.arm.label, []).append(run)
    for label, runs in by_arm.items():
        assert [r.capacity_step for r in runs] == [1, 2, 3] and [r.load_label for r in runs] == ["cap-1", "cap-2", "cap-3"]
        assert all(r.capacity_outcome and r.capacity_outcome["passed"] == (r.rate_multiplier <= truth[label]) for r in runs)
        passed = [r.rate_multiplier for r in runs if r.capacity_outcome["passed"]]
        failed = [r.rate_multiplier for r in runs if not r.capacity_outcome["passed"]]
        assert max(passed) <= truth[label] < min(failed)
    assert [round(r.rate_multiplier, 4) for r in by_arm["baseline"]] == [2.0, round(math.sqrt(32), 4), round(math.sqrt(2 * math.sqrt(32)), 4)]
    # nothing more to add, however often the refresh runs (the reaper, a retried task)
    assert capacity_searches_advance(experiment_id=experiment.pk) == []
    assert experiment_status_refresh(experiment_id=experiment.pk) == "done"
    assert len(_steps(experiment)) == 6


@pytest.mark.django_db(transaction=True)
def test_it_never_adds_two_next_steps_for_one_finished_step():
    experiment = _create()
    experiment_start(experiment=experiment)
    first = _steps(experiment)[0]
    _finish(first, e2e_s=0.2)  # the worker's own refresh adds step 2
    for _ in range(3):  # a redelivered task, the reaper, a page: each refreshes again
        assert capacity_searches_advance(experiment_id=experiment.pk) == []
        experiment_status_refresh(experiment_id=experiment.pk)
    second = Run.objects.filter(experiment=experiment, arm=first.arm, repeat=first.repeat, capacity_step=2)
    assert second.count() == 1 and second.get().status == "queued"
    orders = list(experiment.runs.values_list("order", flat=True))
    assert len(orders) == len(set(orders))


@pytest.mark.django_db(transaction=True)
def test_a_cancel_stops_every_search():
    experiment = _create()
    experiment_start(experiment=experiment)
    first = _steps(experiment)[0]
    token = run_claim(run_id=first.pk, worker="test")
    assert token
    experiment_cancel(experiment=experiment)
    # the running step still finishes (its worker had not seen the cancel): no next step
    Run.objects.filter(pk=first.pk).update(cancel_requested=False)
    requests = list(experiment.trace.requests.order_by("position"))
    rows = [
        RequestResult(run_id=first.pk, trace_request=r, request_id=r.request_id, scheduled_s=0.0, sent_s=0.0,
                      first_token_s=0.01, finish_s=0.1, chunk_times=[0.01, 0.1], chunk_tokens=[1, 1],
                      num_output_tokens=2, finish_reason="length")
        for r in requests
    ]
    assert run_finish(run_id=first.pk, token=token, rows=rows, telemetry={"counters": {}, "samples": []}, wall_s=1.0)
    assert not Run.objects.filter(experiment=experiment, capacity_step=2).exists()
    assert not Run.objects.filter(experiment=experiment, status__in=["queued", "running"]).exists()
    assert Experiment.objects.get(pk=experiment.pk).status == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_the_comparison_keeps_steps_out_of_the_matrix_and_reports_capacity(viewer_client):
    from console.analysis.services import comparison_refresh

    truth = {"baseline": 3.0, "baseline A/A": 3.0}
    experiment = _create(cost_per_hour_usd=2.0, loads="1x=1,2x=3")
    experiment_start(experiment=experiment)
    while queued := list(Run.objects.filter(experiment=experiment, status="queued").select_related("arm", "experiment")):
        for run in queued:
            ok = run.capacity_step is None or run.rate_multiplier <= truth[run.arm.label]
            _finish(run, e2e_s=0.2 if ok else 5.0)
    data = comparison_refresh(experiment_id=experiment.pk, n_boot=50)
    assert {h["load"] for h in data["headline"]} == {"1x", "2x"}  # no cap-N load among them
    assert data["cost_basis"] == "capacity" and data["load_weights"] == {"1x": 1.0, "2x": 3.0}
    arms = {a["arm"]: a for a in data["capacity"]["arms"]}
    assert set(arms) == {"baseline", "baseline A/A"}
    for arm in arms.values():
        low, high = arm["interval"]
        assert low <= 3.0 < high and len(arm["steps"]) == 3 and arm["slo"]["p95_e2e_s"] == 1.0
        assert arm["cost_per_success_usd"] > 0
    aa = arms["baseline A/A"]
    assert aa["ratio"] == pytest.approx(1.0) and aa["ratio_interval"][0] <= 1 <= aa["ratio_interval"][1]
    # the API and the page read the stored comparison
    api = viewer_client.get(f"/api/experiments/{experiment.pk}/comparison").json()
    assert api["cost_basis"] == "capacity"
    assert {a["arm"]: a["rate_multiplier"] for a in api["capacity"]["arms"]} == {
        a: arms[a]["rate_multiplier"] for a in arms
    }
    assert all({"rate_multiplier", "interval", "slo", "steps"} <= set(a) for a in api["capacity"]["arms"])
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    assert 'id="capacity"' in html and "Capacity at the SLO" in html
    assert "Cost basis: capacity at the SLO" in html
    assert 'id="fig-cap-attainment"' in html and 'id="fig-cap-p95_tpot_s"' in html and 'id="fig-cap-p95_e2e_s"' in html
    assert "one repeat: the interval is that search" in html


# --- the interfaces: API, form, run_experiment -------------------------------------------------

OPENAI_ARGS = {"base_url": NOWHERE, "endpoint": "completions"}


def _api_body(trace, **over) -> str:
    import json

    body = {
        "trace": trace.pk,
        "name": "api cap",
        "engine": "openai",
        "target_model": "scripted",
        "baseline_engine_args": OPENAI_ARGS,
        "candidates": [{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
        "load_levels": [{"rate_multiplier": 1, "weight": 2}, {"rate_multiplier": 2, "weight": 1}],
        "repeats": 1,
        "start": False,
    }
    body.update(over)
    return json.dumps(body)


@pytest.mark.django_db
def test_the_api_accepts_a_capacity_search_and_load_weights(client, engineer, api_token_for):
    trace = trace_make(prompts=["a"])
    response = client.post(
        "/api/experiments",
        _api_body(trace, capacity_search={"slo": {"p95_e2e_s": 2}, "steps": 4}),
        content_type="application/json",
        **api_token_for(engineer),
    )
    assert response.status_code == 201, response.content
    experiment = Experiment.objects.get(pk=response.json()["id"])
    assert experiment.capacity_search["steps"] == 4 and experiment.capacity_search["slo"]["p95_e2e_s"] == 2.0
    assert [lv["weight"] for lv in experiment.load_levels] == [2.0, 1.0]
    assert experiment.runs.filter(capacity_step=1).count() == 2


@pytest.mark.django_db
def test_the_api_answers_a_hostile_capacity_search_with_a_400_naming_the_field(client, engineer, api_token_for):
    trace = trace_make(prompts=["a"])
    nested: dict = {}
    for _ in range(50):
        nested = {"x": nested}
    for bad, field in (
        ({"slo": {"attainment": "=HYPERLINK(1)"}}, "capacity_search.slo.attainment"),
        ({"slo": nested}, "capacity_search.slo.x: unknown key"),
        ({"slo": {"p95_e2e_s": 1}, "steps": 10**30}, "capacity_search.steps"),
        ("<script>alert(1)</script>", "capacity_search"),
    ):
        response = client.post(
            "/api/experiments", _api_body(trace, capacity_search=bad), content_type="application/json",
            **api_token_for(engineer),
        )
        assert response.status_code == 400, (bad, response.content)
        assert field in response.content.decode(), response.content
    response = client.post(
        "/api/experiments", _api_body(trace, load_levels=[{"rate_multiplier": 1, "weight": -1}]),
        content_type="application/json", **api_token_for(engineer),
    )
    assert response.status_code == 400
    assert not Experiment.objects.exists()


def _form(trace, **over) -> dict:
    import json

    data = {
        "name": "form cap",
        "trace": trace.pk,
        "split": "all",
        "engine": "openai",
        "target_model": "scripted",
        "baseline_engine_args": json.dumps(OPENAI_ARGS),
        "candidates": json.dumps([{"speculative_config": None, "label": "A/A"}]),
        "load_levels": "1x=3,2x=1",
        "sampling": "trace",
        "repeats": 1,
        "warmup": 0,
        "cost_per_hour_usd": 1,
        "capacity_search": "on",
        "capacity_slo": json.dumps({"attainment": 0.99}),
        "capacity_lo": 0.5,
        "capacity_hi": 8,
        "capacity_steps": 3,
    }
    data.update(over)
    return data


@pytest.mark.django_db
def test_the_form_defines_a_search_and_keeps_the_input_on_error(client, engineer):
    trace = trace_make(prompts=["a"])
    client.force_login(engineer)
    response = client.post("/experiments/new/", _form(trace, capacity_steps=12, capacity_slo='{"attainment": 2}'))
    assert response.status_code == 200
    errors = response.context["form"].errors["capacity_slo"]
    assert any("capacity_search.steps" in e for e in errors) and any("slo.attainment" in e for e in errors), errors
    html = response.content.decode()
    assert "attainment&quot;: 2" in html or '"attainment": 2' in html  # what was typed is still there
    assert 'value="12"' in html
    assert not Experiment.objects.exists()
    response = client.post("/experiments/new/", _form(trace, start_now=""))
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    experiment = Experiment.objects.get()
    assert experiment.capacity_search == {"slo": {"traffic_class": "interactive", "attainment": 0.99}, "lo": 0.5, "hi": 8.0, "steps": 3}
    assert experiment.runs.filter(capacity_step=1, rate_multiplier=2.0).count() == 2


@pytest.mark.django_db
def test_run_experiment_takes_capacity_search_and_refuses_bad_input(tmp_path):
    import json

    from django.core.management import CommandError, call_command

    trace = trace_make(prompts=["a"])
    baseline = json.dumps({"engine": "openai", "target_model": "scripted", "engine_args": OPENAI_ARGS})
    common = {"trace": trace.pk, "baseline": baseline, "candidate": ['{"speculative_config": null, "label": "A/A"}'],
              "repeats": 1}
    for extra, match in (
        ({"capacity_search": True}, "--capacity-search needs --slo"),
        ({"slo": '{"attainment": 0.9}'}, "--slo: only with --capacity-search"),
        ({"capacity_search": True, "slo": "{nope"}, "--slo: not valid JSON"),
        ({"capacity_search": True, "slo": '{"p95_e2e_s": 1}', "capacity_bracket": "2"}, "--capacity-bracket"),
        ({"capacity_search": True, "slo": '{"p95_e2e_s": 1}', "capacity_steps": 99}, "capacity_search.steps"),
    ):
        with pytest.raises(CommandError, match=match) as err:
            call_command("run_experiment", **common, **extra)
        assert err.value.returncode == 2
    assert not Experiment.objects.exists()
    from console.demo.management.commands.run_experiment import Command

    parser = Command().create_parser("manage.py", "run_experiment")
    opts = vars(parser.parse_args(["--trace", str(trace.pk), "--baseline", baseline, "--candidate",
                                   '{"speculative_config": null, "label": "A/A"}', "--capacity-search",
                                   "--slo", '{"p95_tpot_s": 0.5}', "--capacity-bracket", "0.5:4",
                                   "--capacity-steps", "2", "--repeats", "1", "--load", "1x=1,2x=1"]))
    from console.demo.management.commands.run_experiment import capacity_search_option

    assert capacity_search_option(opts) == {"slo": {"p95_tpot_s": 0.5}, "lo": 0.5, "hi": 4.0, "steps": 2}


# --- through a real worker on the scripted server (fast; no model) ------------------------------


@pytest.fixture
def scripted_server(openai_register):
    """Registered before the worker starts (request it before ``celery_worker_proc``)."""
    from tests.support.stream_server import stream_server_start

    server = stream_server_start()
    openai_register(server.base_url, name="scripted")
    yield server
    server.stop()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_every_step_and_the_experiment_ends_when_the_searches_do(scripted_server, celery_worker_proc):
    """The worker adds each next step itself when one finishes. The scripted server streams every
    request in parallel at known times, so the outcome does not depend on the rate: answers of
    0.1 s meet a 1 s p95 e2e everywhere (the search climbs: capacity at least its highest step),
    answers of 1.5 s nowhere (capacity below its lowest step)."""
    from console.analysis.services import comparison_refresh
    from tests.experiments.factories import script_prompt

    server = scripted_server
    search = {"slo": {"p95_e2e_s": 1.0}, "lo": 0.5, "hi": 8, "steps": 3}
    made = {}
    for name, gap in (("quick", 0.02), ("slow", 0.5)):
        made[name] = experiment_create(
            name=name,
            trace=trace_make(name=name, prompts=[script_prompt(gap_s=gap, tokens=4) for _ in range(3)]),
            engine="openai",
            target_model="scripted",
            baseline_engine_args={"base_url": server.base_url, "endpoint": "completions"},
            candidates=[{"speculative_config": None, "label": "baseline A/A"}],
            repeats=1,
            warmup=0,
            capacity_search=search,
        )
        experiment_start(experiment=made[name])
    for experiment in made.values():
        wait_for(lambda e=experiment: Experiment.objects.get(pk=e.pk).status != "running", timeout=300, what="end")
    caps = {}
    for name, experiment in made.items():
        runs = list(experiment.runs.all())
        assert all(r.status == "done" for r in runs), [(r.load_label, r.status, r.error) for r in runs]
        assert sorted(r.capacity_step for r in runs if r.capacity_step) == [1, 1, 2, 2, 3, 3]
        data = comparison_refresh(experiment_id=experiment.pk, n_boot=50)
        caps[name] = {a["arm"]: a for a in data["capacity"]["arms"]}
    quick, slow = caps["quick"]["baseline"], caps["slow"]["baseline"]
    assert quick["searches"][0]["censored"] == "above" and quick["rate_multiplier"] > 4
    assert slow["searches"][0]["censored"] == "below" and slow["rate_multiplier"] is None
    assert caps["quick"]["baseline A/A"]["interval"] == quick["interval"]


# --- the acceptance run: smollm2-135m through a real worker ---------------------------------

MODEL = "smollm2-135m"
LONG_PROMPTS = [
    "List the numbers from 1 to 300, separated by commas:",
    "Write the alphabet twenty times, one letter per line:",
    "Count backwards from 500 to 1, one number per line:",
    "Repeat the word hello one hundred times:",
    "List the even numbers from 2 to 400, separated by commas:",
]


def _accept_experiment(*, name: str, output_limit: int, trace) -> Experiment:
    return experiment_create(
        name=name,
        trace=trace,
        engine="hf",
        target_model=MODEL,
        candidates=[{"speculative_config": None, "label": "baseline A/A"}],
        load_levels="1x",
        # Two repeats: a bracket from one repeat ignores noise near the SLO (once, at the same 0.707x,
        # one arm measured p95 e2e 5.16 s and its A/A twin 3.09 s, and their brackets did not meet);
        # the interval is the envelope of the repeats' brackets.
        repeats=2,
        warmup=0,
        sampling="greedy",
        output_limit=output_limit,
        deadlines={"interactive": {"e2e_s": 600}},
        # p95 of five requests (nearest rank) is the slowest: queueing behind slow answers breaks it
        capacity_search={"slo": {"p95_e2e_s": 5.0}, "lo": 0.25, "hi": 16, "steps": 3},
    )


@pytest.mark.model
@pytest.mark.worker
@pytest.mark.timeout(2400)
@pytest.mark.django_db(transaction=True)
def test_acceptance_a_faster_config_has_a_higher_capacity_and_an_aa_pair_overlaps(celery_worker_proc):
    """The same model with 16 output tokens against 1. Five requests 1 s apart at 1x, SLO p95 e2e
    <= 5 s. Whatever the machine's speed, the 1-token config passes at least where the 16-token
    one does: its capacity is higher (the 16-token config finds none at all on a very loaded
    machine, where one answer takes more than 5 s, or only up to where queueing five answers breaks
    5 s; only a machine that answers 16 tokens in under a second could make both pass everywhere).
    Each experiment's baseline and A/A twin must find overlapping intervals."""
    from console.analysis.services import comparison_refresh
    from workers.catalog.resolve import model_fetch

    model_fetch(name=MODEL, progress=False)
    trace = trace_make(name="cap-accept", prompts=LONG_PROMPTS, arrivals=[0.0, 1.0, 2.0, 3.0, 4.0], max_tokens=16)
    slow = _accept_experiment(name="slow: 16 tokens", output_limit=16, trace=trace)
    fast = _accept_experiment(name="fast: 1 token", output_limit=1, trace=trace)
    experiment_start(experiment=slow)
    experiment_start(experiment=fast)
    for experiment in (slow, fast):
        wait_for(
            lambda e=experiment: Experiment.objects.get(pk=e.pk).status not in ("running", "draft"),
            timeout=2300,
            what=f"{experiment.name} ended",
        )
    capacities = {}
    for experiment in (slow, fast):
        runs = list(experiment.runs.select_related("arm").order_by("order"))
        assert all(r.status == "done" for r in runs), [(r.arm.label, r.load_label, r.status, r.error) for r in runs]
        print(experiment.name, [(r.arm.label, r.load_label, round(r.rate_multiplier, 3), r.wall_s, r.capacity_outcome) for r in runs])
        data = comparison_refresh(experiment_id=experiment.pk, n_boot=50)
        assert data["cost_basis"] == "capacity"
        arms = {a["arm"]: a for a in data["capacity"]["arms"]}
        capacities[experiment.name] = arms
        base, aa = arms["baseline"], arms["baseline A/A"]
        assert len(base["steps"]) == len(aa["steps"]) >= 2
        # the A/A pair: the same capacity within its interval (closed brackets; open ends unbounded)
        b_lo, b_hi = base["interval"]
        a_lo, a_hi = aa["interval"]
        assert (b_lo or 0) <= (a_hi if a_hi is not None else math.inf), (base, aa)
        assert (a_lo or 0) <= (b_hi if b_hi is not None else math.inf), (base, aa)
    slow_cap = capacities["slow: 16 tokens"]["baseline"]
    fast_cap = capacities["fast: 1 token"]["baseline"]
    # nothing passed = below the lowest step: 0 for the comparison
    assert fast_cap["interval"][0] is not None, fast_cap
    assert (fast_cap["rate_multiplier"] or 0) >= (slow_cap["rate_multiplier"] or 0), (slow_cap, fast_cap)
    if slow_cap["interval"][1] is not None:
        # the 16-token config failed somewhere: the 1-token one is plainly higher, beyond its bracket
        assert (fast_cap["rate_multiplier"] or 0) > (slow_cap["rate_multiplier"] or 0), (slow_cap, fast_cap)
        assert fast_cap["interval"][0] >= slow_cap["interval"][1], (slow_cap, fast_cap)
    else:
        # a machine that answers 16 tokens in under a second passes both everywhere: both at the top
        assert fast_cap["interval"][1] is None, (slow_cap, fast_cap)
