"""run_execute in this process (no Celery): what a worker stores and refuses before use.

The worker checks a config again before it starts the engine (a row stored before configs
were validated must not reach an internal address or send a worker variable), and every
error it stores is cut and scrubbed of keys: viewers read run and request errors.
"""

from __future__ import annotations

import socket

import pytest

from console.experiments.models import Run, ServingConfig
from console.experiments.services import experiment_create
from tests.experiments.factories import trace_make
from tests.workers.echo_server import PADDING, echo_server
from workers.execution import run_execute

pytestmark = pytest.mark.django_db


def _experiment(base_url: str, **engine_args):
    return experiment_create(
        name="exec",
        trace=trace_make(prompts=["a"]),
        engine="openai",
        target_model="m",
        baseline_engine_args={"base_url": base_url, **engine_args},
        candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
        repeats=1,
        warmup=0,
    )


def test_it_refuses_a_stored_config_that_names_a_worker_variable_and_never_connects(
    openai_register, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL_COPY", "postgres://admin:hunter2@db/prod")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        openai_register("http://127.0.0.1:9/v1", name="registered")
        experiment = _experiment("http://127.0.0.1:9/v1")
        run = experiment.runs.get(arm__is_baseline=True)
        # As a row written before configs were validated would be.
        ServingConfig.objects.filter(pk=run.arm.config_id).update(
            engine_args={
                "base_url": url,
                "api_key_env": "DATABASE_URL_COPY",
                "timeout_s": 2,
                "connect_timeout_s": 2,
            }
        )
        assert run_execute(run_id=run.pk) == "failed"
        with pytest.raises(BlockingIOError):
            listener.accept()
    run.refresh_from_db()
    assert "engine_args.api_key_env is not accepted" in run.error
    assert "hunter2" not in run.error


@pytest.mark.django_db(transaction=True)  # the replay's heartbeat reads the claim on its own connection
def test_it_stores_a_servers_error_cut_and_without_the_key_it_echoed(openai_register, monkeypatch):
    key = "prod-9f8e7d6c5b4a3210"
    monkeypatch.setenv("SPECREVIEW_ECHO_KEY", key)
    with echo_server() as (url, seen):
        openai_register(url, name="echo", credential_env="SPECREVIEW_ECHO_KEY")
        experiment = _experiment(url)
        run = experiment.runs.get(arm__is_baseline=True)
        # /models answers 500: noted, not fatal (some servers fail it and serve completions);
        # every request then gets the 500, and the run fails saying what the server said.
        assert run_execute(run_id=run.pk) == "failed"
    assert seen and all(h == f"Bearer {key}" for h in seen)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "500 from" in run.error
    assert key not in run.error and "[redacted]" in run.error and PADDING not in run.error
    assert len(run.error.encode()) < 2300


@pytest.mark.django_db(transaction=True)  # the heartbeat thread reads the claim on its own connection
def test_it_stores_a_servers_per_request_spec_totals_and_counter_deltas(openai_register):
    from console.analysis.services import comparison_refresh
    from console.results.models import RequestResult, RunTelemetry
    from tests.support.stream_server import Script, stream_server_start

    # Every request: the prefill's token, then 3 steps of 3 drafts accepting 2, 0 and 3 tokens;
    # the server reports them at vLLM's summary level (totals, no steps).
    script = Script(tokens=[1, 3, 1, 4], drafted=[None, 3, 3, 3], accepted=[None, 2, 0, 3], spec_metrics="summary")
    server = stream_server_start(script=script, model="m")
    scrapes = []

    def kv_page() -> str:  # vLLM's KV figures; one preemption more at each scrape
        scrapes.append(1)
        return (
            f'vllm:num_preemptions_total{{engine="0"}} {len(scrapes)}\n'
            'vllm:kv_cache_usage_perc{engine="0"} 0.5\n'
            'vllm:cache_config_info{block_size="16",engine="0",kv_cache_size_tokens="4096",num_gpu_blocks="256"} 1\n'
        )

    server.server.metrics_extra = kv_page
    try:
        openai_register(server.base_url, name="scripted")
        experiment = experiment_create(
            name="exec-spec",
            trace=trace_make(prompts=["a", "b", "c"]),
            engine="openai",
            target_model="m",
            baseline_engine_args={"server": "scripted"},
            candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}],
            repeats=1,
            warmup=0,
        )
        for run in experiment.runs.order_by("order"):
            assert run_execute(run_id=run.pk) == "done", Run.objects.get(pk=run.pk).error
    finally:
        server.stop()
    candidate = experiment.runs.get(arm__is_baseline=False)
    rows = RequestResult.objects.filter(run=candidate)
    assert rows.count() == 3
    assert all(r.spec_totals == {"drafts": 3, "draft_tokens": 9, "accepted": 5} and r.drafted == [] for r in rows)
    counters = RunTelemetry.objects.get(run=candidate).counters
    assert (counters["spec_decode_num_drafts"], counters["spec_decode_num_accepted_tokens"]) == (9, 15)
    summary = comparison_refresh(experiment_id=experiment.pk, n_boot=50)
    spec = next(s for s in summary["speculation"] if not s["is_baseline"])
    assert spec["source"] == "per-request" and (spec["drafts"], spec["drafted"], spec["accepted"]) == (9, 27, 15)
    assert spec["did_not_speculate"] is False and spec["server"]["accepted"] == 15
    # The KV figures sampled during the run ride in the counters' JSON and reach the comparison.
    kv = counters["kv"]
    assert kv["kv_cache_tokens"] == 4096 and kv["kv_usage_peak"] == 0.5
    assert kv["preemptions"] == kv["num_samples"] - 1 >= 1  # the window's scrapes, first to last
    rows = {r["arm"]: r for r in summary["kv"]}
    assert len(rows) == 2 and rows[candidate.arm.label]["kv_capacity_lost"] == 0.0


def test_it_stores_each_requests_prompt_length_as_the_engine_counted_it_else_the_traces(
    openai_register, settings
):
    from tests.support.stream_server import Script, script_prompt, stream_server_start

    # The heartbeat thread's own connection cannot see this test's transaction: no beat mid-run.
    settings.SPECREVIEW_RUN_HEARTBEAT_S = 600

    server = stream_server_start(script=Script(tokens=[1]), model="m")
    prompts = [script_prompt(prompt_tokens=321), script_prompt(prompt_tokens=5), script_prompt(usage=False)]
    try:
        openai_register(server.base_url, name="scripted")
        experiment = experiment_create(
            name="exec-prompt-tokens",
            trace=trace_make(prompts=prompts),
            engine="openai",
            target_model="m",
            baseline_engine_args={"server": "scripted"},
            candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
            repeats=1,
            warmup=0,
        )
        run = experiment.runs.get(arm__is_baseline=True)
        assert run_execute(run_id=run.pk) == "done", Run.objects.get(pk=run.pk).error
    finally:
        server.stop()
    run.refresh_from_db()
    by_prompt = {tr.prompt: tr for tr in experiment.trace.requests.all()}
    stored = {by_prompt[p].request_id: run.prompt_tokens[by_prompt[p].request_id] for p in prompts}
    ids = [by_prompt[p].request_id for p in prompts]
    assert stored[ids[0]] == {"n": 321, "source": "engine"}
    assert stored[ids[1]] == {"n": 5, "source": "engine"}
    # No usage from the server: the trace's own (import-time) count, marked as such.
    assert stored[ids[2]] == {"n": by_prompt[prompts[2]].prompt_tokens, "source": "trace"}
    assert len(run.prompt_tokens) == 3
