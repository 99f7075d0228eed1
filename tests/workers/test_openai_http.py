"""The openai engine against a real local OpenAI-compatible server (workers.testing.stream_server)."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from workers.engines import engine_create
from workers.engines.base import EngineConfig, EngineError, EngineRequest
from workers.engines.openai_http import OpenAIEngine, prometheus_spec_counters
from workers.testing.stream_server import TOKEN_ID_BASE, Script, script_prompt, stream_server_spawn


@pytest.fixture(scope="module")
def server():
    srv = stream_server_spawn(script=Script(ttft_s=0.0, tokens=[1, 1]), model="tiny")
    yield srv
    srv.stop()


def _engine(server, **args) -> OpenAIEngine:
    engine = OpenAIEngine()
    engine.start(
        EngineConfig(engine="openai", target_model="tiny", engine_args={"base_url": server.base_url, **args})
    )
    return engine


async def _collect(engine, request):
    return [chunk async for chunk in engine.stream(request)]


def _run(engine, request):
    async def go():
        try:
            return await _collect(engine, request)
        finally:
            await engine.aclose()

    return asyncio.run(go())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_it_is_registered_as_the_openai_kind():
    assert isinstance(engine_create("openai"), OpenAIEngine)


@pytest.mark.parametrize("transport", ["native", "httpx"])
def test_it_streams_completions_chunk_by_chunk_with_token_ids(server, transport):
    engine = _engine(server, transport=transport)
    prompt = script_prompt(ttft_s=0.02, gap_s=[0.01, 0.01], tokens=[1, 3, 2], finish_reason="stop")
    chunks = _run(engine, EngineRequest(request_id=f"c-{transport}", max_tokens=8, prompt=prompt))
    visible = [c for c in chunks if c.text or c.token_ids]
    assert [c.token_ids for c in visible] == [
        [TOKEN_ID_BASE],
        [TOKEN_ID_BASE + 1, TOKEN_ID_BASE + 2, TOKEN_ID_BASE + 3],
        [TOKEN_ID_BASE + 4, TOKEN_ID_BASE + 5],
    ]
    assert "".join(c.text for c in visible) == " t0 t1 t2 t3 t4 t5"
    assert chunks[-1].finish_reason == "stop"
    times = [c.t for c in visible]
    # 20 ms apart at the server; the client may see the first one late, never the gaps vanish.
    assert times == sorted(times) and times[-1] - times[0] > 0.005
    logged = [r for r in server.requests() if r["request_id"] == f"c-{transport}"]
    assert len(logged) == 1 and logged[0]["path"] == "/v1/completions"


def test_it_uses_chat_when_the_request_has_messages_and_skips_the_role_only_event(server):
    engine = _engine(server)
    messages = [{"role": "user", "content": script_prompt(ttft_s=0.05, tokens=[2])}]
    chunks = _run(engine, EngineRequest(request_id="chat-1", max_tokens=4, messages=messages))
    # The server sends a role-only event at once, then the content after 50 ms: the first
    # chunk must be the content, or TTFT would read as ~0.
    assert len(chunks) == 1 and chunks[0].token_ids == [TOKEN_ID_BASE, TOKEN_ID_BASE + 1]
    logged = next(r for r in server.requests() if r["request_id"] == "chat-1")
    assert logged["path"] == "/v1/chat/completions"
    assert chunks[0].t - logged["recv_s"] >= 0.05


def test_it_counts_tokens_from_usage_when_the_server_sends_no_ids(server):
    engine = _engine(server, return_token_ids=False)
    chunks = _run(engine, EngineRequest(request_id="u-1", max_tokens=8, prompt=script_prompt(tokens=[2, 3])))
    assert [c.token_ids for c in chunks] == [[], []]
    assert [c.num_tokens for c in chunks] == [2, 3]


def test_it_sends_the_api_key_from_the_named_environment_variable(server, monkeypatch):
    monkeypatch.setenv("SPECREVIEW_TEST_KEY", "sk-test-123")
    engine = _engine(server, api_key_env="SPECREVIEW_TEST_KEY")
    _run(engine, EngineRequest(request_id="key-1", max_tokens=2, prompt="hi"))
    logged = next(r for r in server.requests() if r["request_id"] == "key-1")
    assert logged["authorization"] == "Bearer sk-test-123"


def test_it_reads_spec_decode_counter_deltas_from_metrics(server):
    engine = _engine(server)
    before = engine.counters()
    prompt = script_prompt(tokens=[3, 1, 4], drafted=[3, 3, 3], accepted=[2, 0, 3])
    _run(engine, EngineRequest(request_id="spec-1", max_tokens=8, prompt=prompt))
    after = engine.counters()
    assert after["spec_decode_num_drafts"] - before["spec_decode_num_drafts"] == 3
    assert after["spec_decode_num_draft_tokens"] - before["spec_decode_num_draft_tokens"] == 9
    assert after["spec_decode_num_accepted_tokens"] - before["spec_decode_num_accepted_tokens"] == 5
    per_pos_before = before.get("spec_decode_num_accepted_tokens_per_pos", [])
    per_pos_after = after["spec_decode_num_accepted_tokens_per_pos"]
    delta = [a - (per_pos_before[i] if i < len(per_pos_before) else 0) for i, a in enumerate(per_pos_after)]
    assert delta == [2, 2, 1]


def test_it_parses_vllm_metrics_with_labels_suffixes_and_several_engines():
    text = """
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen2.5-1.5B"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="Qwen/Qwen2.5-1.5B"} 5.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="Qwen/Qwen2.5-1.5B"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="Qwen/Qwen2.5-1.5B"} 45.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="Qwen/Qwen2.5-1.5B"} 27.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen2.5-1.5B",position="1"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen2.5-1.5B",position="0"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen2.5-1.5B",position="2"} 7.0
process_resident_memory_bytes 1.2345e+09
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-1.5B"} 3.0
"""
    counters = prometheus_spec_counters(text=text)
    assert counters == {
        "spec_decode_num_drafts": 15,
        "spec_decode_num_draft_tokens": 45,
        "spec_decode_num_accepted_tokens": 27,
        "spec_decode_num_accepted_tokens_per_pos": [12, 8, 7],
        "server_rss_bytes": 1.2345e9,
    }


def test_it_reports_a_metrics_page_it_cannot_read_without_failing(server):
    engine = _engine(server, metrics_url=server.root_url + "/no-such-page")
    assert "404" in engine.counters()["metrics_error"]


def test_it_refuses_a_4xx_as_permanent_with_the_servers_message(server):
    engine = _engine(server)
    prompt = script_prompt(status=400, message="max_tokens is too large: 99999 > 4096")
    with pytest.raises(EngineError, match="max_tokens is too large") as err:
        _run(engine, EngineRequest(request_id="e-400", max_tokens=99999, prompt=prompt))
    assert not err.value.transient


def test_it_marks_a_503_as_transient(server):
    engine = _engine(server)
    with pytest.raises(EngineError, match="503") as err:
        _run(engine, EngineRequest(request_id="e-503", max_tokens=4, prompt=script_prompt(status=503)))
    assert err.value.transient


def test_it_refuses_a_malformed_sse_event(server):
    engine = _engine(server)
    prompt = script_prompt(tokens=[1, 1, 1], malformed_after=1)
    with pytest.raises(EngineError, match="malformed SSE event") as err:
        _run(engine, EngineRequest(request_id="e-bad", max_tokens=4, prompt=prompt))
    assert not err.value.transient


def test_it_reports_a_connection_dropped_mid_stream_as_transient(server):
    engine = _engine(server)
    prompt = script_prompt(tokens=[1, 1, 1], drop_after=2)
    with pytest.raises(EngineError) as err:
        _run(engine, EngineRequest(request_id="e-drop", max_tokens=4, prompt=prompt))
    assert err.value.transient
    # The engine still serves the next request (the broken connection was not pooled).
    assert _run(engine, EngineRequest(request_id="after-drop", max_tokens=4, prompt="hi"))


def test_it_fails_start_transiently_when_nothing_listens():
    engine = OpenAIEngine()
    config = EngineConfig(
        engine="openai", target_model="tiny", engine_args={"base_url": f"http://127.0.0.1:{_free_port()}/v1"}
    )
    with pytest.raises(EngineError, match="cannot reach") as err:
        engine.start(config)
    assert err.value.transient


def test_it_fails_a_stream_transiently_when_the_server_went_away():
    engine = OpenAIEngine()
    port = _free_port()
    engine.start(
        EngineConfig(
            engine="openai",
            target_model="tiny",
            engine_args={"base_url": f"http://127.0.0.1:{port}/v1", "check_server": False},
        )
    )
    with pytest.raises(EngineError, match="cannot connect") as err:
        _run(engine, EngineRequest(request_id="gone", max_tokens=4, prompt="hi"))
    assert err.value.transient


def test_it_refuses_a_model_the_server_does_not_serve(server):
    engine = OpenAIEngine()
    config = EngineConfig(engine="openai", target_model="other", engine_args={"base_url": server.base_url})
    with pytest.raises(EngineError, match="serves \\['tiny'\\]") as err:
        engine.start(config)
    assert not err.value.transient


@pytest.mark.parametrize(
    ("args", "spec", "message"),
    [
        ({}, None, "base_url"),
        ({"base_url": "127.0.0.1:8000"}, None, "base_url"),
        ({"base_url": "http://x/v1", "endpoint": "responses"}, None, "endpoint"),
        ({"base_url": "http://x/v1", "temperature": 0}, None, "not understood"),
        ({"base_url": "http://x/v1"}, ["ngram"], "must be an object"),
        ({"base_url": "http://x/v1"}, {"method": "ngram", "num_speculative_tokens": 0}, ">= 1"),
    ],
)
def test_it_refuses_bad_configs_before_any_run(args, spec, message):
    config = EngineConfig(engine="openai", target_model="m", engine_args=args, speculative_config=spec)
    with pytest.raises(EngineError, match=message) as err:
        OpenAIEngine().start(config)
    assert not err.value.transient


def test_it_accepts_vllm_speculative_keys_as_a_record_of_what_the_server_runs(server):
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    engine = OpenAIEngine()
    engine.start(
        EngineConfig(
            engine="openai",
            target_model="tiny",
            engine_args={"base_url": server.base_url},
            speculative_config=spec,
        )
    )
    assert engine.versions()["engine"] == "openai"


def test_it_sends_the_requests_sampling_and_seed(server):
    engine = _engine(server, extra_body={"ignore_eos": True})
    url, body = engine.request_body(
        request=EngineRequest(request_id="b", max_tokens=7, prompt="p", temperature=0.7, top_p=0.9, seed=3)
    )
    assert url.endswith("/v1/completions")
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["seed"]) == (7, 0.7, 0.9, 3)
    assert body["stream"] is True and body["ignore_eos"] is True and body["return_token_ids"] is True


def test_it_reuses_kept_alive_connections(server):
    engine = _engine(server)

    async def sequential():
        try:
            for i in range(8):
                await _collect(engine, EngineRequest(request_id=f"ka-{i}", max_tokens=2, prompt="hi"))
        finally:
            await engine.aclose()

    asyncio.run(sequential())
    ports = {r["peer_port"] for r in server.requests() if (r["request_id"] or "").startswith("ka-")}
    assert len(ports) == 1


@pytest.mark.parametrize("transport", ["native", "httpx"])
def test_it_gives_up_on_a_server_that_stays_silent_past_the_timeout(server, transport):
    engine = _engine(server, timeout_s=0.3, transport=transport)
    began = time.perf_counter()
    with pytest.raises(EngineError) as err:
        _run(
            engine,
            EngineRequest(request_id=f"slow-{transport}", max_tokens=2, prompt=script_prompt(ttft_s=3.0)),
        )
    assert err.value.transient and ("0.3 s" in str(err.value) or "timed out" in str(err.value))
    assert time.perf_counter() - began < 2.0
