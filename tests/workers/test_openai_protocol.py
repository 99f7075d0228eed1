"""What the openai engine sends to which server kind, and how it reads streams and refusals.

No server: request bodies are built from a config, SSE bodies are fed to the parser as lines.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from console.analysis.quality import tool_call_check
from console.env import SettingsError, envopenai_servers
from workers.engines.base import EngineConfig, EngineError, EngineRequest
from workers.engines.openai_http import OpenAIEngine
from workers.engines.openai_stream import (
    StreamStats,
    error_message,
    refused_fields,
    request_body_build,
    sse_chunks,
)

URL = "http://127.0.0.1:9/v1"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def _body(kind: str, **args):
    config = EngineConfig(engine="openai", target_model="m", engine_args={"base_url": URL, **args})
    request = EngineRequest(request_id="r", max_tokens=4, prompt="hi")
    return request_body_build(config=config, base_url=URL, request=request, server_kind=kind)[1]


def _events(*events, done: bool = True) -> list[str]:
    lines = []
    for event in events:
        lines += [f"data: {json.dumps(event)}", ""]
    if done:
        lines += ["data: [DONE]", ""]
    return lines


def _parse(lines: list[str], stats: StreamStats | None = None):
    async def feed():
        for i, line in enumerate(lines):
            yield line, float(i)

    async def go():
        return [c async for c in sse_chunks(lines=feed(), url=URL, stats=stats)]

    return asyncio.run(go())


def _delta(finish=None, usage=None, **delta):
    event = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage:
        event["usage"] = usage
    return event


def test_it_sends_vllms_extensions_only_to_vllm():
    vllm, plain, unknown = _body("vllm"), _body("openai"), _body("unknown")
    assert vllm["return_token_ids"] is True
    assert vllm["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    for body in (plain, unknown):
        assert "return_token_ids" not in body
        assert body["stream_options"] == {"include_usage": True}


def test_it_lets_explicit_engine_args_override_the_servers_kind():
    assert "return_token_ids" not in _body("vllm", return_token_ids=False)
    forced = _body("unknown", return_token_ids=True, continuous_usage_stats=True)
    assert forced["return_token_ids"] is True and forced["stream_options"]["continuous_usage_stats"] is True


def test_it_accepts_a_stream_that_ends_after_its_finish_reason_without_done_and_counts_it():
    stats = StreamStats()
    lines = _events(
        _delta(role="assistant"),
        _delta(content="Hi"),
        _delta(finish="stop", usage={"prompt_tokens": 3, "completion_tokens": 1}),
        done=False,
    )
    chunks = _parse(lines, stats)
    assert "".join(c.text for c in chunks) == "Hi" and chunks[-1].finish_reason == "stop"
    assert (stats.streams, stats.ended_without_done) == (1, 1)
    _parse(_events(_delta(content="x", finish="stop")), stats)
    assert (stats.streams, stats.ended_without_done) == (2, 1)


def test_it_fails_transiently_a_stream_that_ends_before_any_finish_reason_without_done():
    with pytest.raises(EngineError, match="before any finish_reason") as caught:
        _parse(_events(_delta(role="assistant"), _delta(content="Hi"), done=False))
    assert caught.value.transient


def test_it_keeps_the_name_of_a_streamed_tool_call_so_the_validity_check_sees_it():
    call = {"index": 0, "id": "call_0", "type": "function"}
    lines = _events(
        _delta(role="assistant"),
        _delta(tool_calls=[{**call, "function": {"name": "get_weather", "arguments": ""}}]),
        _delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city": '}}]),
        _delta(tool_calls=[{"index": 0, "function": {"arguments": '"Paris"}'}}]),
        _delta(finish="tool_calls"),
    )
    text = "".join(c.text for c in _parse(lines))
    assert text == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert tool_call_check(text, TOOLS) == {"tool_valid": True, "reason": None}


def test_it_keeps_every_call_of_a_parallel_tool_call_and_a_call_without_arguments():
    lines = _events(
        _delta(
            tool_calls=[{"index": 0, "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]
        ),
        _delta(tool_calls=[{"index": 1, "function": {"name": "get_time"}}]),
        _delta(finish="tool_calls"),
    )
    text = "".join(c.text for c in _parse(lines))
    assert text.count("<tool_call>") == 2 and '"name": "get_time", "arguments": {}}' in text
    check = tool_call_check(text, TOOLS)
    assert check == {"tool_valid": False, "reason": "unknown tool 'get_time'"}


@pytest.mark.parametrize(
    "body, fields",
    [
        ({"detail": "Unexpected fields in the request: {'return_token_ids'}"}, ["return_token_ids"]),
        (
            {
                "detail": [
                    {"type": "extra_forbidden", "loc": ["body", "return_token_ids"], "msg": "Extra inputs"}
                ]
            },
            ["return_token_ids"],
        ),
        (
            {
                "detail": [
                    {
                        "type": "extra_forbidden",
                        "loc": ["body", "stream_options", "continuous_usage_stats"],
                        "msg": "Extra inputs are not permitted",
                    }
                ]
            },
            ["stream_options.continuous_usage_stats"],
        ),
        (
            {"error": {"message": "Unrecognized request argument supplied: return_token_ids"}},
            ["return_token_ids"],
        ),
        ({"detail": [{"type": "less_than_equal", "loc": ["body", "temperature"], "msg": "too big"}]}, []),
        ({"error": {"message": "model not found"}}, []),
    ],
)
def test_it_reads_which_field_a_server_refused(body, fields):
    assert refused_fields(json.dumps(body).encode()) == fields


def test_it_says_how_to_switch_off_a_refused_vllm_field():
    message = error_message(b'{"detail":"Unexpected fields in the request: {\'return_token_ids\'}"}')
    assert "refused field 'return_token_ids' (vLLM-only)" in message
    assert "engine_args.return_token_ids: false" in message and '"kind": "openai"' in message
    assert "Unexpected fields" in message  # what the server said stays


def test_it_reads_a_servers_kind_from_its_registration(monkeypatch):
    monkeypatch.setenv("S", json.dumps({"a": {"url": "http://h:1/v1", "kind": "vllm"}, "b": "http://h:2/v1"}))
    servers = envopenai_servers("S", credentials={})
    assert servers["a"] == {"url": "http://h:1/v1", "credential": "", "kind": "vllm"}
    assert "kind" not in servers["b"]
    monkeypatch.setenv("S", json.dumps({"a": {"url": "http://h:1/v1", "kind": "sglang"}}))
    with pytest.raises(SettingsError, match="kind must be one of"):
        envopenai_servers("S", credentials={})


class _Probed(BaseHTTPRequestHandler):
    """A server with a model list and a metrics page (vLLM's when ``vllm``), but no /version."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        pages = {
            "/v1/models": json.dumps({"data": [{"id": "m"}]}),
            "/metrics": "vllm:num_requests_running 0\n"
            if self.server.vllm
            else "process_cpu_seconds_total 1\n",  # type: ignore[attr-defined]
        }
        body = pages.get(self.path, '{"detail": "Not Found"}').encode()
        self.send_response(200 if self.path in pages else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def probed():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Probed)
    httpd.paths, httpd.vllm = [], True  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def _started(url: str) -> OpenAIEngine:
    engine = OpenAIEngine()
    engine.start(EngineConfig(engine="openai", target_model="m", engine_args={"base_url": url}))
    return engine


def test_it_detects_vllm_from_a_vllm_sample_on_its_metrics_page(probed, openai_register):
    httpd, url = probed
    openai_register(url)
    engine = _started(url)
    assert (engine.versions()["server_kind"], engine.versions()["server_kind_source"]) == ("vllm", "/metrics")
    assert engine.request_body(request=EngineRequest(request_id="r", max_tokens=1, prompt="x"))[1][
        "return_token_ids"
    ]
    httpd.vllm = False
    assert _started(url).versions()["server_kind"] == "unknown"


def test_it_never_probes_a_server_registered_as_plain_openai(probed, openai_register, settings):
    httpd, url = probed
    openai_register(url)
    settings.SPECREVIEW_OPENAI_SERVERS = {"test": {"url": url, "credential": "", "kind": "openai"}}
    engine = _started(url)
    assert engine.versions()["server_kind_source"] == "registration" and httpd.paths == ["/v1/models"]
    assert (
        "return_token_ids" not in engine.request_body(request=EngineRequest(request_id="r", max_tokens=1))[1]
    )


def test_it_counts_one_token_per_event_when_the_server_sends_no_counts_and_lets_the_total_correct_it():
    stats = StreamStats()
    lines = _events(
        _delta(content="Hel"),
        _delta(content="lo"),
        _delta(finish="length", usage={"prompt_tokens": 3, "completion_tokens": 4}),
        done=False,
    )
    chunks = _parse(lines, stats)
    assert [c.num_tokens for c in chunks] == [1, 1, 2] and stats.estimated_counts == 1
    assert chunks[-1].prompt_tokens == 3
