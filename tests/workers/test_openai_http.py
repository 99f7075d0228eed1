"""The openai engine against a real local OpenAI-compatible server (tests.support.stream_server)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from tests.support.net import free_port
from tests.support.stream_server import (
    TOKEN_ID_BASE,
    Script,
    script_prompt,
    stream_server_spawn,
    stream_server_start,
)
from workers.engines import engine_create
from workers.engines.base import EngineConfig, EngineError, EngineRequest
from workers.engines.openai_http import OpenAIEngine
from workers.engines.openai_metrics import prometheus_kv_state, prometheus_spec_counters, spec_request_metrics
from workers.replay.records import RequestSpec
from workers.replay.run import replay_run_sync


@pytest.fixture(scope="module")
def server():
    srv = stream_server_spawn(script=Script(ttft_s=0.0, tokens=[1, 1]), model="tiny")
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def _registered(server, openai_register):
    openai_register(server.base_url)


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


def test_it_sends_the_key_of_the_servers_registered_credential(server, monkeypatch, openai_register):
    monkeypatch.setenv("SPECREVIEW_TEST_KEY", "sk-test-123")
    openai_register(server.base_url, name="keyed", credential_env="SPECREVIEW_TEST_KEY")
    engine = OpenAIEngine()
    engine.start(EngineConfig(engine="openai", target_model="tiny", engine_args={"server": "keyed"}))
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


def test_it_fails_start_transiently_when_nothing_listens(openai_register):
    engine = OpenAIEngine()
    url = openai_register(f"http://127.0.0.1:{free_port()}/v1", name="nothing")
    config = EngineConfig(engine="openai", target_model="tiny", engine_args={"server": url})
    with pytest.raises(EngineError, match="cannot reach") as err:
        engine.start(config)
    assert err.value.transient


def test_it_fails_a_stream_transiently_when_the_server_went_away(openai_register):
    engine = OpenAIEngine()
    port = free_port()
    openai_register(f"http://127.0.0.1:{port}/v1", name="gone")
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
def test_it_refuses_bad_configs_before_any_run(args, spec, message, openai_register):
    openai_register("http://x/v1", name="x")
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


# -- what a config may reach and send (operator-registered servers and credentials) ------------


@pytest.fixture
def listener():
    """A bare socket on 127.0.0.1: an internal address no config should reach."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", sock
    sock.close()


def _contacted(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def test_it_refuses_a_base_url_no_operator_registered_and_never_connects(listener):
    url, sock = listener
    config = EngineConfig(engine="openai", target_model="m", engine_args={"base_url": url})
    with pytest.raises(EngineError, match="is not a registered server") as err:
        OpenAIEngine().start(config)
    assert "test" in str(err.value)  # it says which servers are registered
    assert not err.value.transient
    assert not _contacted(sock)


@pytest.mark.parametrize(
    ("args", "refused"),
    [({"api_key_env": "DATABASE_URL"}, "api_key_env"), ({"api_key": "sk-literal-123456"}, "api_key")],
)
def test_it_refuses_a_key_given_in_the_config_even_for_a_registered_server(
    listener, openai_register, monkeypatch, args, refused
):
    url, sock = listener
    monkeypatch.setenv("DATABASE_URL", "postgres://admin:hunter2@db/prod")
    openai_register(url, name="internal")
    config = EngineConfig(
        engine="openai", target_model="m", engine_args={"base_url": url, "check_server": False, **args}
    )
    with pytest.raises(EngineError, match=rf"engine_args.{refused} is not accepted.*\"server\"") as err:
        OpenAIEngine().start(config)
    assert "hunter2" not in str(err.value) and "sk-literal" not in str(err.value)
    assert not _contacted(sock)


def test_it_refuses_a_credential_the_server_was_not_registered_with(server, openai_register, monkeypatch):
    monkeypatch.setenv("SPECREVIEW_TEST_KEY", "sk-test-123")
    openai_register(server.base_url, name="keyed", credential_env="SPECREVIEW_TEST_KEY")
    config = EngineConfig(
        engine="openai", target_model="tiny", engine_args={"server": "test", "credential": "keyed-key"}
    )
    with pytest.raises(EngineError, match="engine_args.credential 'keyed-key' is not the credential"):
        OpenAIEngine().start(config)


def test_it_refuses_an_unknown_server_name_saying_which_are_registered():
    config = EngineConfig(engine="openai", target_model="tiny", engine_args={"server": "prod"})
    with pytest.raises(
        EngineError, match=r"engine_args.server 'prod' is not a registered server; registered: test"
    ):
        OpenAIEngine.validate(config)


def test_it_refuses_a_metrics_url_off_the_servers_host(server, listener):
    url, sock = listener
    config = EngineConfig(
        engine="openai",
        target_model="tiny",
        engine_args={"server": "test", "metrics_url": url.removesuffix("/v1") + "/metrics"},
    )
    with pytest.raises(EngineError, match="metrics_url must be on the server's own scheme, host and port"):
        OpenAIEngine().start(config)
    assert not _contacted(sock)


def test_it_scrubs_and_cuts_a_server_error_that_echoes_the_key(openai_register, monkeypatch):
    from tests.workers.echo_server import PADDING, echo_server

    key = "prod-9f8e7d6c5b4a3210"
    monkeypatch.setenv("SPECREVIEW_ECHO_KEY", key)
    with echo_server() as (url, seen):
        openai_register(url, name="echo", credential_env="SPECREVIEW_ECHO_KEY")
        engine = OpenAIEngine()
        engine.start(
            EngineConfig(
                engine="openai", target_model="m", engine_args={"server": "echo", "check_server": False}
            )
        )
        with pytest.raises(EngineError) as err:
            _run(engine, EngineRequest(request_id="echo-1", max_tokens=2, prompt="hi"))
    assert seen == [f"Bearer {key}"]  # the key was sent, to the registered server only
    message = str(err.value)
    assert message.startswith("500 from ") and "[redacted]" in message
    assert key not in message and PADDING not in message
    assert len(message.encode()) < 2300


def test_it_asks_for_a_server_name_when_a_base_url_is_registered_twice(server, openai_register, monkeypatch):
    monkeypatch.setenv("SPECREVIEW_TEST_KEY", "sk-test-123")
    openai_register(server.base_url, name="keyed", credential_env="SPECREVIEW_TEST_KEY")
    config = EngineConfig(engine="openai", target_model="tiny", engine_args={"base_url": server.base_url})
    with pytest.raises(EngineError, match='is registered as test, keyed: name one with "server"'):
        OpenAIEngine.validate(config)


SPEC_SCRIPTS = [  # (tokens per chunk, drafted per step, accepted per step): chunk i = step i's a + 1
    ([1, 3, 1, 4], [None, 3, 3, 3], [None, 2, 0, 3]),
    ([1, 2, 2], [None, 3, 2], [None, 1, 1]),
]


def _spec_specs(level, *, chat=False):
    specs = []
    for i, (tokens, drafted, accepted) in enumerate(SPEC_SCRIPTS):
        prompt = script_prompt(tokens=tokens, drafted=drafted, accepted=accepted, spec_metrics=level)
        request = (
            EngineRequest(request_id=f"{level}-{i}", max_tokens=16, messages=[{"role": "user", "content": prompt}])
            if chat
            else EngineRequest(request_id=f"{level}-{i}", max_tokens=16, prompt=prompt)
        )
        specs.append(RequestSpec(request=request, arrival_s=0.01 * i))
    return specs


@pytest.mark.parametrize("chat", [False, True])
def test_it_records_vllm_per_request_steps_from_the_final_event_detailed(server, chat):
    result = replay_run_sync(engine=_engine(server), specs=_spec_specs("detailed", chat=chat))
    for record, (tokens, drafted, accepted) in zip(result.records, SPEC_SCRIPTS, strict=True):
        assert record.status == "ok", record.error
        assert record.drafted == [d for d in drafted if d] and record.accepted == accepted[1:]
        assert record.num_output_tokens == sum(tokens)  # the step chunks carry no tokens
        assert record.chunk_tokens == tokens
    # Per-request sums equal the run's counter deltas from /metrics.
    delta = result.counters_delta
    assert delta["spec_decode_num_drafts"] == sum(len(r.drafted) for r in result.records) == 5
    assert delta["spec_decode_num_draft_tokens"] == sum(sum(r.drafted) for r in result.records) == 14
    assert delta["spec_decode_num_accepted_tokens"] == sum(sum(r.accepted) for r in result.records) == 7


def test_it_carries_the_summary_levels_totals_on_one_chunk(server):
    engine = _engine(server)
    tokens, drafted, accepted = SPEC_SCRIPTS[0]
    prompt = script_prompt(tokens=tokens, drafted=drafted, accepted=accepted, spec_metrics="summary")
    chunks = _run(engine, EngineRequest(request_id="summary-1", max_tokens=16, prompt=prompt))
    assert all(c.drafted is None for c in chunks)
    totals = [c.spec_totals for c in chunks if getattr(c, "spec_totals", None)]
    assert totals == [{"drafts": 3, "draft_tokens": 9, "accepted": 5}]
    # The replay keeps them on the request's record, beside no steps.
    result = replay_run_sync(engine=_engine(server), specs=_spec_specs("summary"))
    assert [r.spec_totals for r in result.records] == [
        {"drafts": 3, "draft_tokens": 9, "accepted": 5},
        {"drafts": 2, "draft_tokens": 5, "accepted": 2},
    ]
    assert all(r.drafted == [] and r.as_row()["spec_totals"] == r.spec_totals for r in result.records)


def test_it_records_no_steps_when_the_server_sends_no_per_request_metrics(server):
    result = replay_run_sync(engine=_engine(server), specs=_spec_specs(None))
    assert all(r.drafted == [] and r.accepted == [] for r in result.records)
    assert result.counters_delta["spec_decode_num_drafts"] == 5  # the run level still has them


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ([1, 2], "must be an object"),
        ({"num_spec_steps": 2, "num_draft_tokens": 6}, "num_accepted_draft_tokens must be a count"),
        ({"num_spec_steps": 2, "num_draft_tokens": 6, "num_accepted_draft_tokens": -1}, "must be a count"),
        ({"num_spec_steps": 2, "num_draft_tokens": 6, "num_accepted_draft_tokens": 7}, "accepts 7 of 6"),
        (
            {"num_spec_steps": 2, "num_draft_tokens": 6, "num_accepted_draft_tokens": 3,
             "per_step_drafted": [3, 3], "per_step_accepted": [3]},
            "do not add up",
        ),
        (
            {"num_spec_steps": 2, "num_draft_tokens": 6, "num_accepted_draft_tokens": 4,
             "per_step_drafted": [3, 3], "per_step_accepted": [1, 2]},
            "do not add up",
        ),
        (
            {"num_spec_steps": 1, "num_draft_tokens": 3, "num_accepted_draft_tokens": 0,
             "per_step_drafted": "3", "per_step_accepted": [0]},
            "lists of counts",
        ),
    ],
)
def test_it_refuses_per_request_metrics_that_do_not_add_up(metrics, message):
    with pytest.raises(EngineError, match=message) as err:
        spec_request_metrics(metrics=metrics, where="the last SSE event from http://x/v1/completions")
    assert "the last SSE event from http://x/v1/completions" in str(err.value)


def test_it_leaves_out_samples_that_are_not_finite():
    page = (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 4.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} NaN\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} +Inf\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 3.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN\n'
        "process_resident_memory_bytes -Inf\n"
    )
    counters = prometheus_spec_counters(text=page)  # no int(NaN) / int(inf) error
    assert counters == {"spec_decode_num_drafts": 4, "spec_decode_num_accepted_tokens": 3}
    assert "kv_cache_usage_perc" not in prometheus_kv_state(text=page)
    json.dumps(counters, allow_nan=False)  # storable as JSON


def test_it_reads_a_vllm_metrics_page_without_spec_counters_as_not_speculating():
    page = 'vllm:num_requests_running{engine="0",model_name="m"} 0.0\nprocess_resident_memory_bytes 1e9\n'
    counters = prometheus_spec_counters(text=page)
    assert counters["spec_decode_num_drafts"] == counters["spec_decode_num_accepted_tokens"] == 0
    assert counters["spec_decode"] == "not configured"
    # Another server's page without them says nothing either way.
    assert "spec_decode_num_drafts" not in prometheus_spec_counters(text="sglang:num_running_reqs 0.0\n")


VLLM_KV_PAGE = """
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="tiny"}} {usage}
vllm:kv_cache_usage_perc{{engine="1",model_name="tiny"}} {usage_1}
vllm:num_requests_running{{engine="0",model_name="tiny"}} {running}
vllm:num_requests_running{{engine="1",model_name="tiny"}} 1.0
vllm:num_requests_waiting{{engine="0",model_name="tiny"}} {waiting}
vllm:num_preemptions_total{{engine="0",model_name="tiny"}} {preemptions}
vllm:num_preemptions_created{{engine="0",model_name="tiny"}} 1.7e+09
vllm:cache_config_info{{block_size="16",engine="0",kv_cache_size_tokens="{tokens}",num_cpu_blocks="None",num_gpu_blocks="1000",gpu_memory_utilization="0.9"}} 1.0
"""


def test_it_parses_vllms_kv_cache_gauges_preemptions_and_cache_config_info():
    page = VLLM_KV_PAGE.format(usage=0.5, usage_1=0.25, running=3, waiting=2, preemptions=7, tokens="15872")
    state = prometheus_kv_state(text=page)
    assert state == {
        "kv_cache_usage_perc": 0.375,  # the mean over engines
        "num_requests_running": 4,  # summed over engines
        "num_requests_waiting": 2,
        "num_preemptions": 7,
        "kv_cache_tokens": 15872,  # vLLM's group-aware figure, not blocks x block size
        "kv_blocks": 1000,
        "kv_cpu_blocks": None,
        "block_size": 16,
    }
    # A vLLM before kv_cache_size_tokens: blocks x block size.
    older = page.replace('kv_cache_size_tokens="15872",', "")
    assert prometheus_kv_state(text=older)["kv_cache_tokens"] == 16000
    # A server that exports none of them says nothing (not measured), rather than zeros.
    assert prometheus_kv_state(text="process_resident_memory_bytes 1e9\n") == {}


def test_it_records_kv_usage_preemptions_and_capacity_over_a_run_from_the_servers_metrics(openai_register):
    thread = stream_server_start(script=Script(ttft_s=0.3, gap_s=0.4, tokens=[1, 1, 1, 1]), model="tiny")
    served: list[dict] = []

    def page() -> str:  # a server under load: usage and preemptions climb with each scrape
        n = len(served)
        state = {"usage": min(0.2 * n, 0.9), "usage_1": min(0.2 * n, 0.9), "running": n, "waiting": n // 2}
        served.append(state | {"preemptions": 10 + 2 * n})
        return VLLM_KV_PAGE.format(**served[-1], tokens="None")

    thread.server.metrics_extra = page
    try:
        openai_register(thread.base_url)
        specs = [RequestSpec(request=EngineRequest(request_id=f"kv-{i}", max_tokens=4, prompt="hi"), arrival_s=0.1 * i) for i in range(3)]
        result = replay_run_sync(engine=_engine(thread), specs=specs)
    finally:
        thread.stop()
    assert all(r.status == "ok" for r in result.records)
    kv = result.telemetry["kv"]
    window = served[1:-1]  # the first and last scrapes are counters() before and after the window
    assert kv["num_samples"] == len(window) >= 3  # ~1.5 s sampled every 0.5 s
    assert kv["kv_cache_tokens"] == 16000 and kv["kv_blocks"] == 1000 and kv["block_size"] == 16
    assert kv["preemptions"] == window[-1]["preemptions"] - window[0]["preemptions"] > 0
    assert kv["kv_usage_peak"] == pytest.approx(max(s["usage"] for s in window))
    assert kv["running_peak"] == max(s["running"] for s in window) + 1  # engine 1 runs one more
    assert kv["waiting_peak"] == max(s["waiting"] for s in window)
    assert len(kv["samples"]) == kv["num_samples"]


def test_it_reads_the_servers_prompt_token_count_once_from_continuous_usage(server):
    engine = _engine(server)
    messages = [{"role": "user", "content": script_prompt(tokens=[1, 2], prompt_tokens=321)}]
    chunks = _run(engine, EngineRequest(request_id="pt-1", max_tokens=4, messages=messages))
    assert [c.prompt_tokens for c in chunks] == [321, None]  # on the first content chunk, once


def test_it_reads_the_servers_prompt_token_count_from_the_final_usage_event(server):
    engine = _engine(server, continuous_usage_stats=False)
    chunks = _run(
        engine, EngineRequest(request_id="pt-2", max_tokens=4, prompt=script_prompt(prompt_tokens=77))
    )
    told = [c for c in chunks if c.prompt_tokens is not None]
    assert len(told) == 1 and told[0].prompt_tokens == 77
    assert told[0].token_ids == [] and not told[0].text and told[0].num_tokens == 0
    logged = next(r for r in server.requests() if r["request_id"] == "pt-2")
    assert logged["path"] == "/v1/completions"


def test_it_tells_no_prompt_count_when_the_server_sends_no_usage(server):
    engine = _engine(server)
    chunks = _run(engine, EngineRequest(request_id="pt-3", max_tokens=4, prompt=script_prompt(usage=False)))
    assert chunks and all(c.prompt_tokens is None for c in chunks)
