"""Output-length buckets as a matrix axis: parsing, the run matrix, which requests a run replays
and with what limit, and located errors on the API, the CLI and the form."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from django.core.management import CommandError, call_command
from hypothesis import given
from hypothesis import strategies as st

from console.experiments.matrix import matrix_order, output_buckets_parse, recorded_output_tokens
from console.experiments.models import Experiment, Run
from console.experiments.services import ExperimentInvalid, experiment_create
from console.traces.models import TraceRequest
from tests.experiments.factories import trace_make
from workers.execution import run_requests

OPENAI_ARGS = {"base_url": "http://127.0.0.1:9/v1", "check_server": False}
NGRAM = {"method": "ngram", "num_speculative_tokens": 2}
# Recorded output lengths of the trace's requests r0..r5 (a timing trace's metadata.paired).
RECORDED = [10, 40, 63, 64, 300, 2000]


def test_it_parses_edges_and_limits_into_half_open_buckets():
    buckets = output_buckets_parse("0:64, 64:256 ,256:1024")
    assert [(b.label, b.lo, b.hi, b.output_limit) for b in buckets] == [
        ("0-64", 0, 64, 64),
        ("64-256", 64, 256, 256),
        ("256+", 256, None, 1024),
    ]
    assert [b.contains(n) for b in buckets for n in (63, 64)] == [True, False, False, True, False, False]
    assert buckets[2].contains(10**6)
    # Stored form round-trips (a clone re-reads it), and nothing means no buckets.
    assert output_buckets_parse([b.as_dict() for b in buckets]) == buckets
    assert output_buckets_parse("") == output_buckets_parse(None) == output_buckets_parse([]) == []


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            "0:64,64:256,32:1024",
            r"output bucket 3: edge 32 is not above bucket 2's edge 64 \(edges must increase\)",
        ),
        ("0:64,0:128", r"output bucket 2: edge 0 is not above bucket 1's edge 0"),
        (
            "0:64,64:0",
            r"output bucket 2: the output limit must be a whole number of tokens from 1 to 2147483647, got '0'",
        ),
        (
            "-5:10",
            r"output bucket 1: the edge must be a whole number of tokens from 0 to 2147483647, got '-5'",
        ),
        ("0:64,abc", r"output bucket 2 \('abc'\) is not like 64:256"),
        ([{"lo": 0, "output_limit": 1.5}], r"output bucket 1: the output limit .* got 1.5"),
        ([{"lo": True, "output_limit": 4}], r"output bucket 1: the edge .* got True"),
        (
            "0:64,2147483648:8",
            r"output bucket 2: the edge must be a whole number of tokens from 0 to 2147483647",
        ),
        (",".join(f"{i}:8" for i in range(33)), r"at most 32 output buckets, got 33"),
    ],
)
def test_it_names_the_bucket_and_what_is_wrong(spec, message):
    with pytest.raises(ValueError, match=message):
        output_buckets_parse(spec)


@given(arms=st.integers(1, 4), loads=st.integers(1, 3), repeats=st.integers(1, 3), buckets=st.integers(1, 3))
def test_it_runs_every_arm_load_bucket_cell_once_per_repeat_in_balanced_blocks(arms, loads, repeats, buckets):
    order = matrix_order(arms=arms, loads=loads, repeats=repeats, buckets=buckets)
    cells = [
        (a, lv, r, b)
        for a in range(arms)
        for lv in range(loads)
        for r in range(repeats)
        for b in range(buckets)
    ]
    assert Counter(order) == Counter(cells)
    for index in range(0, len(order), arms):
        block = order[index : index + arms]
        assert len({(lv, r, b) for _, lv, r, b in block}) == 1
        expected = list(range(arms)) if (index // arms) % 2 == 0 else list(reversed(range(arms)))
        assert [a for a, *_ in block] == expected


def test_it_reads_the_recorded_output_length_where_the_trace_keeps_it():
    assert recorded_output_tokens(max_tokens=512, metadata={"paired": {"trace_output_tokens": 37}}) == 37
    assert recorded_output_tokens(max_tokens=512, metadata={}) == 512
    assert recorded_output_tokens(max_tokens=512, metadata={"paired": {"trace_output_tokens": "x"}}) == 512


@pytest.fixture
def trace(db):
    trace = trace_make(prompts=[f"p{i}" for i in range(len(RECORDED))], max_tokens=4096, holdout_every=100)
    for tr in TraceRequest.objects.filter(trace=trace):
        tr.metadata = {"paired": {"trace_output_tokens": RECORDED[tr.position]}}
        tr.max_tokens = RECORDED[tr.position]
        tr.save(update_fields=["metadata", "max_tokens"])
    return trace


def _create(trace, **over):
    kwargs = {
        "name": "b",
        "trace": trace,
        "engine": "openai",
        "target_model": "m",
        "baseline_engine_args": OPENAI_ARGS,
        "candidates": [{"speculative_config": NGRAM}],
        "load_levels": "1x,2x",
        "repeats": 2,
    }
    return experiment_create(**(kwargs | over))


@pytest.fixture(autouse=True)
def _registered(openai_register):
    openai_register("http://127.0.0.1:9/v1", name="local")


def test_it_expands_the_matrix_by_bucket_and_keeps_no_buckets_as_before(trace):
    plain = _create(trace)
    assert plain.output_buckets == []
    assert plain.runs.count() == 2 * 2 * 2 and set(plain.runs.values_list("output_bucket", flat=True)) == {""}
    bucketed = _create(trace, name="b2", output_buckets="0:32,64:256,256:128")
    assert [b["label"] for b in bucketed.output_buckets] == ["0-64", "64-256", "256+"]
    runs = list(bucketed.runs.all())
    assert len(runs) == 2 * 2 * 2 * 3
    assert Counter((r.arm.label, r.load_label, r.repeat, r.output_bucket) for r in runs) == Counter(
        {
            (arm, load, repeat, bucket): 1
            for arm in ("baseline", "ngram k=2")
            for load in ("1x", "2x")
            for repeat in (0, 1)
            for bucket in ("0-64", "64-256", "256+")
        }
    )


def test_a_clone_keeps_the_buckets(trace):
    from console.experiments.services import experiment_clone

    original = _create(trace, output_buckets="0:32,64:256")
    clone = experiment_clone(experiment=original)
    assert clone.output_buckets == original.output_buckets
    assert sorted(clone.runs.values_list("output_bucket", flat=True)) == sorted(
        original.runs.values_list("output_bucket", flat=True)
    )


def test_a_bucket_run_replays_its_requests_with_the_buckets_limit(trace):
    experiment = _create(trace, output_buckets="0:32,64:256,256:128", output_limit=200)
    picked = {
        bucket: [
            (tr.request_id, req.max_tokens) for tr, req in run_requests(experiment=experiment, bucket=bucket)
        ]
        for bucket in ("0-64", "64-256", "256+")
    }
    # min(recorded max_tokens, the bucket's limit, the experiment's output limit)
    assert picked == {
        "0-64": [("r0", 10), ("r1", 32), ("r2", 32)],
        "64-256": [("r3", 64)],
        "256+": [("r4", 128), ("r5", 128)],
    }
    assert [tr.request_id for tr, _ in run_requests(experiment=experiment)] == [f"r{i}" for i in range(6)]
    with pytest.raises(ValueError, match="output bucket '9-10' is not one of the experiment's"):
        run_requests(experiment=experiment, bucket="9-10")


def test_it_refuses_a_bucket_no_request_falls_in_and_stores_nothing(trace):
    with pytest.raises(ExperimentInvalid) as err:
        _create(trace, output_buckets="0:32,2100:64,5000:64")
    assert err.value.errors["output_buckets"] == [
        "output bucket 2 (2100-5000 tokens): no request of the trace has a recorded output length in it",
        "output bucket 3 (5000+ tokens): no request of the trace has a recorded output length in it",
    ]
    assert not Experiment.objects.exists() and not Run.objects.exists()


def test_it_refuses_buckets_on_a_trace_with_multi_turn_sessions(trace):
    first, second = list(trace.requests.order_by("position")[:2])
    TraceRequest.objects.filter(pk__in=[first.pk, second.pk]).update(session_id="s1")
    TraceRequest.objects.filter(pk=second.pk).update(turn=1, think_time_s=1.0)
    with pytest.raises(ExperimentInvalid) as err:
        _create(trace, output_buckets="0:32,64:64")
    assert "multi-turn sessions" in err.value.errors["output_buckets"][0]
    assert not Experiment.objects.exists() and not Run.objects.exists()
    assert _create(trace).runs.count() > 0  # without buckets the same trace is fine


def test_it_takes_buckets_over_the_api_and_answers_400_naming_the_bucket(
    client, engineer, api_token_for, trace
):
    auth = api_token_for(engineer)
    body = {
        "trace": trace.pk,
        "engine": "openai",
        "target_model": "m",
        "baseline_engine_args": OPENAI_ARGS,
        "candidates": [{"speculative_config": NGRAM}],
        "start": False,
        "output_buckets": [{"lo": 0, "output_limit": 64}, {"lo": 256, "output_limit": 512}],
    }
    response = client.post("/api/experiments", json.dumps(body), content_type="application/json", **auth)
    assert response.status_code == 201, response.content
    status = response.json()
    assert [b["label"] for b in status["output_buckets"]] == ["0-256", "256+"]
    assert {r["output_bucket"] for r in status["runs"]} == {"0-256", "256+"}
    for bad, where in (
        ("0:64,64:0", "output bucket 2: the output limit"),
        (
            [{"lo": 64, "output_limit": 8}, {"lo": 0, "output_limit": 8}],
            "output bucket 2: edge 0 is not above",
        ),
    ):
        response = client.post(
            "/api/experiments",
            json.dumps(body | {"output_buckets": bad}),
            content_type="application/json",
            **auth,
        )
        assert response.status_code == 400
        assert any(where in m for m in response.json()["details"]["output_buckets"]), response.json()
    response = client.post(
        "/api/experiments",
        json.dumps(body | {"output_buckets": [{"lo": -1, "output_limit": 8}]}),
        content_type="application/json",
        **auth,
    )
    assert response.status_code == 400 and "output_buckets" in response.content.decode()
    assert Experiment.objects.count() == 1


def test_it_exits_2_on_the_cli_naming_the_bucket(tmp_path, trace):
    baseline = tmp_path / "base.yaml"
    baseline.write_text(
        "engine: openai\ntarget_model: m\nengine_args:\n  base_url: http://127.0.0.1:9/v1\n  check_server: false\n"
    )
    with pytest.raises(CommandError, match=r"output_buckets: output bucket 2: edge 10 is not above") as err:
        call_command(
            "run_experiment",
            trace=trace.pk,
            baseline=str(baseline),
            candidate=[json.dumps(NGRAM)],
            output_buckets="64:64,10:64",
        )
    assert err.value.returncode == 2
    assert not Experiment.objects.exists()


def test_the_form_shows_the_bucket_error_on_its_field(engineer_client, trace):
    response = engineer_client.post(
        "/experiments/new/",
        {
            "trace": trace.pk,
            "name": "f",
            "engine": "openai",
            "target_model": "m",
            "baseline_engine_args": json.dumps(OPENAI_ARGS),
            "candidates": json.dumps([{"speculative_config": NGRAM}]),
            "load_levels": "1x",
            "output_buckets": "0:64,64:-1",
            "split": "all",
            "sampling": "trace",
            "repeats": 1,
            "warmup": 0,
            "cost_per_hour_usd": 0,
        },
    )
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert any("output bucket 2: the output limit" in e for e in errors.get("output_buckets", [])), errors
    assert not Experiment.objects.exists()


@pytest.fixture
def stream_server(openai_register):
    from tests.support.stream_server import stream_server_start

    srv = stream_server_start()
    openai_register(srv.base_url)
    yield srv
    srv.stop()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_replays_each_buckets_requests_only(stream_server, celery_worker_proc):
    from console.results.models import RequestResult
    from tests.conftest import wait_for
    from tests.experiments.factories import script_prompt

    trace = trace_make(name="buckets", prompts=[script_prompt(tokens=3) for _ in range(4)], max_tokens=10)
    TraceRequest.objects.filter(trace=trace, position__gte=2).update(max_tokens=100)
    experiment = experiment_create(
        name="buckets",
        trace=trace,
        engine="openai",
        target_model="scripted",
        baseline_engine_args={"base_url": stream_server.base_url, "endpoint": "completions"},
        candidates=[{"speculative_config": NGRAM}],
        load_levels="1x",
        repeats=1,
        warmup=0,
        output_buckets="0:8,50:64",
    )
    from console.experiments.services import experiment_start

    experiment_start(experiment=experiment)
    wait_for(
        lambda: Experiment.objects.get(pk=experiment.pk).status == "done", timeout=120, what="experiment done"
    )
    runs = list(Run.objects.filter(experiment=experiment).order_by("order"))
    assert len(runs) == 2 * 2 and all(r.status == "done" for r in runs)
    replayed = {
        (r.arm.label, r.output_bucket): sorted(
            RequestResult.objects.filter(run=r).values_list("request_id", flat=True)
        )
        for r in runs
    }
    assert replayed == {
        (arm, bucket): ids
        for arm in ("baseline", "ngram k=2")
        for bucket, ids in (("0-50", ["r0", "r1"]), ("50+", ["r2", "r3"]))
    }
    assert {r.progress_total for r in runs} == {2}
