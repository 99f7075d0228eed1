"""The openai engine against a second real server: Hugging Face's ``transformers serve``.

One server process for the module, on 127.0.0.1 and the CPU, pinned to the smallest local model
(smollm2-135m from the model cache). With no hub cache folder its ``/v1/models`` answers 500
(chat completions still work); it refuses vLLM's ``return_token_ids`` with a 422; its streams end
after the chunk carrying ``finish_reason`` and usage, without ``[DONE]``; it has no ``/version``
and no ``/metrics``. The engine, with its default engine_args, must serve all of that.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from console.analysis.comparison.schema import summary_load
from console.analysis.selectors import comparison_for_experiment, comparison_state
from console.decisions import gate
from console.experiments.models import Experiment, Run
from console.experiments.services import experiment_create, experiment_start
from console.results.models import RequestResult
from tests.conftest import wait_for
from tests.experiments.factories import trace_make
from tests.support.net import free_port
from tests.support.pages import page_section
from workers.catalog.resolve import model_resolve
from workers.engines.base import EngineConfig, EngineError, EngineRequest
from workers.engines.openai_http import OpenAIEngine
from workers.replay.records import RequestSpec
from workers.replay.run import replay_run_sync

pytestmark = [pytest.mark.model, pytest.mark.slow]

START_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base URL ending in /v1, the model name the server answers to)."""
    # make test installs the `serving` extra: a missing server fails here, never skips (a skip
    # would hide a missing install step).
    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    # This interpreter's own CLI first: another transformers on PATH is not the one under test.
    here = Path(sys.executable).with_name("transformers")
    cli = str(here) if here.exists() else shutil.which("transformers") or ""
    if missing or not cli:
        pytest.fail(f"transformers serve cannot start here ({missing or 'no transformers CLI'}): pip install -e '.[serving]'")
    model = str(model_resolve(name_or_path="smollm2-135m"))
    port = free_port()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        # No hub cache folder: /v1/models then answers 500, as it does for a new user.
        "HF_HUB_CACHE": str(tmp_path_factory.mktemp("hub") / "absent"),
        "OMP_NUM_THREADS": "1",
    }
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("w")
    args = [cli, "serve", model, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    proc = subprocess.Popen([*args, "--dtype", "float32"], env=env, stdout=log, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited with {proc.returncode}; see {log.name}")
            try:
                if httpx.get(f"{root}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not answer /health in {START_TIMEOUT_S} s")
            time.sleep(0.5)
        yield f"{root}/v1", model
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(autouse=True)
def _registered(served, openai_register):
    openai_register(served[0])


def _engine(served, **args) -> OpenAIEngine:
    url, model = served
    engine = OpenAIEngine()
    engine.start(EngineConfig(engine="openai", target_model=model, engine_args={"base_url": url, **args}))
    return engine


def _stream(engine, request):
    async def go():
        try:
            return [chunk async for chunk in engine.stream(request)]
        finally:
            await engine.aclose()

    return asyncio.run(go())


def _chat(request_id: str, text: str = "Say hi.") -> EngineRequest:
    return EngineRequest(
        request_id=request_id, max_tokens=3, messages=[{"role": "user", "content": text}], temperature=0.0
    )


def test_it_starts_although_the_servers_model_list_answers_500(served):
    url, _ = served
    assert httpx.get(f"{url}/models", timeout=10).status_code == 500  # the premise
    engine = _engine(served)
    versions = engine.versions()
    assert versions["models_check"].startswith("HTTP 500")
    assert versions["server_kind"] == "unknown" and versions["server_kind_source"] == "detected: not vLLM"


def test_it_sends_no_vllm_only_field_to_a_server_not_known_as_vllm(served):
    # check_server off here and below: each test then isolates one defect (not the 500 above).
    engine = _engine(served, check_server=False, continuous_usage_stats=False)
    _, body = engine.request_body(request=_chat("plain"))
    assert "return_token_ids" not in body
    chunks = _stream(engine, _chat("plain"))
    assert chunks[-1].finish_reason in ("length", "stop")


def test_it_accepts_a_stream_that_ends_after_finish_reason_without_done(served):
    engine = _engine(served, check_server=False, return_token_ids=False, continuous_usage_stats=False)
    chunks = _stream(engine, _chat("no-done"))
    assert "".join(c.text for c in chunks) and chunks[-1].finish_reason in ("length", "stop")
    assert engine.versions()["stream_end"] == "1 of 1 streams ended after finish_reason without [DONE]"


def test_it_names_the_refused_field_and_how_to_switch_it_off(served):
    engine = _engine(served, check_server=False, return_token_ids=True)
    with pytest.raises(EngineError) as caught:
        _stream(engine, _chat("refused"))
    message = str(caught.value)
    assert message.startswith("422 from ") and not caught.value.transient
    assert "refused field 'return_token_ids' (vLLM-only): set engine_args.return_token_ids: false" in message


def test_it_replays_requests_with_the_default_engine_args_and_measures_no_acceptance(served):
    engine = _engine(served)
    specs = [
        RequestSpec(request=_chat(f"r{i}", text), arrival_s=0.1 * i)
        for i, text in enumerate(["Say hi.", "Name a colour.", "Count to three."])
    ]
    try:
        result = replay_run_sync(engine=engine, specs=specs)
    finally:
        engine.stop()
    for record in result.records:
        assert record.status == "ok", record.error
        assert record.output_text and record.finish_reason in ("length", "stop")
        assert record.first_token_s is not None and record.finish_s >= record.first_token_s
        assert record.chunk_times == sorted(record.chunk_times) and record.prompt_tokens
        assert 0 < record.num_output_tokens <= 3  # the final usage's count
        assert record.drafted == [] and record.accepted == [] and record.spec_totals is None
    assert not any(key.startswith("spec_decode") for key in result.counters_delta)
    assert result.versions["server_kind"] == "unknown"
    told, _, rest = result.versions["stream_end"].partition(" of ")
    assert rest.startswith(f"{told} streams ended after finish_reason without [DONE]") and int(told) >= 3


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_runs_an_experiment_through_a_real_worker_and_the_gate_says_why_it_cannot_pass(
    served, celery_worker_proc, engineer, viewer_client
):
    """Baseline, an A/A twin and a candidate claiming n-gram, against a server that measures no
    acceptance: every run completes, the candidate's acceptance is not measured, and the gate
    does not pass, saying why."""
    _, model = served
    n = 4
    prompts = ["The capital of France is", "def add(a, b):", "One, two, three,", "Hello, my name is"]
    experiment = experiment_create(
        name="transformers serve",
        trace=trace_make(name="ts", prompts=prompts[:n], arrivals=[0.2 * i for i in range(n)], max_tokens=3),
        engine="openai",
        target_model=model,
        baseline_engine_args={"server": "test"},
        candidates=[
            {"speculative_config": None, "label": "baseline again"},
            {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}, "label": "ngram"},
        ],
        load_levels="1x",
        repeats=1,
        warmup=0,
        sampling="greedy",
        created_by=engineer,
    )
    experiment_start(experiment=experiment)
    wait_for(
        lambda: Experiment.objects.get(pk=experiment.pk).status != "running",
        timeout=300,
        what="experiment end",
    )
    runs = list(Run.objects.filter(experiment=experiment).select_related("arm"))
    assert len(runs) == 3 and all(r.status == "done" for r in runs), [
        (r.arm.label, r.status, r.error) for r in runs
    ]
    for run in runs:
        assert run.versions["server_kind"] == "unknown" and "without [DONE]" in run.versions["stream_end"]
        rows = list(RequestResult.objects.filter(run=run))
        assert len(rows) == n and all(not r.error and r.output_text and r.drafted == [] for r in rows)
    try:
        wait_for(lambda: comparison_state(experiment=experiment) == "ready", timeout=60, what="comparison")
    except AssertionError:
        log = Path(celery_worker_proc.log_path).read_text()
        raise AssertionError(f"{comparison_state(experiment=experiment)}: {log[-4000:]}") from None
    summary = summary_load(comparison_for_experiment(experiment=experiment))
    # The candidate claims n-gram; the server tells nothing of drafts: not measured, not "none".
    ngram = next(row for row in summary.speculation if row.arm == "ngram")
    assert ngram.speculative and ngram.source is None and ngram.drafted is None, ngram
    assert not ngram.did_not_speculate and ngram.acceptance_rate is None
    facts = gate.gate_facts_from_summary(summary, candidate_arm="ngram", traffic_class="interactive")
    result = gate.gate_evaluate(facts, None, traffic_class="interactive")
    assert result["overall"] != "pass"
    why = {c["key"]: (c["status"], c["summary"]) for c in result["criteria"] if c["status"] != "pass"}
    assert why and all(reason for _, reason in why.values()), why
    # The gate refuses the claim itself: nothing shows that the candidate drafted.
    status, reason = why["latency_benefit"]
    assert status == "not_measured" and reason.startswith(
        "no drafting evidence: ngram is configured to speculate"
    )
    # The comparison page names where every memory and acceptance figure came from: this server
    # registered no telemetry (memory not measured, per arm, saying why) and reports no drafts.
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    memory = page_section(html, "memory-sources")
    assert memory.count('<span class="badge na">not measured</span>') == 3 and "names no telemetry" in memory
    assert "the worker process" not in memory
    speculation = page_section(html, "speculation")
    assert "no drafting evidence" in speculation and "no drafting evidence: ngram is configured" in speculation
