"""A small OpenAI-compatible streaming server for tests and benchmarks.

It speaks just enough HTTP/1.1 (keep-alive, chunked Server-Sent Events) to serve
``/v1/completions`` and ``/v1/chat/completions`` the way vLLM's server does, plus
``/v1/models``, ``/health``, ``/version`` (as vLLM answers it, so the openai engine takes it
for vLLM) and a Prometheus ``/metrics`` with vLLM's spec-decode counter names. It is written on bare asyncio streams, with no web framework, so that its own
overhead is small and known: the timestamps it records are what the benchmarks trust.

Two modes:

- **scripted**: every request streams a script of chunks at known offsets from the
  moment the request line arrived (``ttft_s``, then ``gap_s`` between chunks, ``tokens``
  per chunk, optional ``drafted``/``accepted`` per chunk). A request may carry its own
  script as a prompt (or last user message) of the form ``script:{...json...}``; it may
  also ask for an HTTP error (``status``), a dropped connection (``drop_after``) or a
  malformed event (``malformed_after``).
- **engine**: any started :class:`~workers.engines.base.Engine` (e.g. the ``hf`` engine)
  serves real generations; the server counts drafted/accepted tokens per step from the
  engine's chunks for ``/metrics``.

Every request is logged (``GET /_log``, cleared by ``POST /_reset``): its ``X-Request-Id``,
the ``time.perf_counter()`` at which its request line arrived (``recv_s``), and the
perf_counter time at which each chunk was written (``chunk_s``). perf_counter is
CLOCK_MONOTONIC on Linux, shared by all processes of the machine, so a client in
another process can compare its own times with these directly.

Run it alone with ``python -m tests.support.stream_server --port 8000``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.engines.base import Chunk, Engine, EngineError, EngineRequest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT_PREFIX = "script:"
TOKEN_ID_BASE = 1000  # scripted token ids are TOKEN_ID_BASE + position
MAX_LOG = 200_000  # requests kept in the log; the oldest half goes when it is full


@dataclass
class Script:
    """What a scripted request streams. Times in seconds, counts in tokens.

    Chunk ``i`` is written at ``recv + ttft_s + sum(gaps[:i])``; ``tokens[i]`` tokens each.
    """

    ttft_s: float = 0.0
    gap_s: float | list[float] = 0.0
    tokens: list[int] = field(default_factory=lambda: [1])
    drafted: list[int | None] | None = None
    accepted: list[int | None] | None = None
    finish_reason: str = "length"
    status: int = 200
    message: str = "scripted error"
    drop_after: int | None = None  # abort the connection after this many chunks
    malformed_after: int | None = None  # write a broken event after this many chunks
    # vLLM's --per-request-spec-decode-metrics: "summary" or "detailed" puts the request's
    # drafted/accepted steps in ``metrics.speculative_decoding`` of the final usage event.
    spec_metrics: str | None = None
    # ``usage.prompt_tokens`` as the server reports it (a real server counts its templated
    # prompt); default: the words of the prompt. ``usage: False`` sends no usage at all.
    prompt_tokens: int | None = None
    usage: bool = True

    def offsets(self) -> list[float]:
        """Seconds from the request's arrival at which each chunk is due."""
        gaps = self.gap_s if isinstance(self.gap_s, list) else [self.gap_s] * max(len(self.tokens) - 1, 0)
        out = [self.ttft_s]
        for gap in gaps[: len(self.tokens) - 1]:
            out.append(out[-1] + gap)
        return out


def script_parse(*, data: dict[str, Any], default: Script) -> Script:
    """A Script from a JSON object; missing keys come from ``default``."""
    known = set(Script.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown script keys {sorted(unknown)}; known: {sorted(known)}")
    merged = {name: getattr(default, name) for name in known}
    merged.update(data)
    if "tokens" in data and isinstance(data["tokens"], int):
        merged["tokens"] = [1] * data["tokens"]
    return Script(**merged)


def script_prompt(**script: Any) -> str:
    """A prompt that makes the scripted server stream this script (keys of :class:`Script`)."""
    script_parse(data=script, default=Script())  # refuse a typo here, not as a server 400
    return SCRIPT_PREFIX + json.dumps(script)


def _prompt_text(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        prompt = prompt[0] if prompt and isinstance(prompt[0], str) else ""
    if isinstance(prompt, str):
        return prompt
    messages = body.get("messages") or []
    if not messages:
        return ""
    content = messages[-1].get("content", "")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class _Counters:
    """Spec-decode counters with vLLM's semantics: one draft per verification step."""

    def __init__(self) -> None:
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_per_pos: list[int] = []
        self.requests_finished = 0
        self.generation_tokens = 0

    def add_step(self, *, drafted: int | None, accepted: int | None) -> None:
        if not drafted:
            return
        accepted = accepted or 0
        self.num_drafts += 1
        self.num_draft_tokens += drafted
        self.num_accepted_tokens += accepted
        while len(self.accepted_per_pos) < drafted:
            self.accepted_per_pos.append(0)
        for pos in range(accepted):
            self.accepted_per_pos[pos] += 1

    def prometheus(self, *, model: str) -> str:
        """The counters in Prometheus text format, named and labelled as vLLM names them."""
        labels = f'engine="0",model_name="{model}"'
        lines = []
        for name, value in (
            ("spec_decode_num_drafts", self.num_drafts),
            ("spec_decode_num_draft_tokens", self.num_draft_tokens),
            ("spec_decode_num_accepted_tokens", self.num_accepted_tokens),
            ("generation_tokens", self.generation_tokens),
        ):
            lines += [f"# TYPE vllm:{name} counter", f"vllm:{name}_total{{{labels}}} {float(value)}"]
            lines.append(f"vllm:{name}_created{{{labels}}} 1.7e9")
        lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
        for pos, value in enumerate(self.accepted_per_pos):
            lines.append(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{pos}"}} {float(value)}'
            )
        lines.append("# TYPE vllm:request_success counter")
        lines.append(
            f'vllm:request_success_total{{{labels},finished_reason="length"}} {self.requests_finished}'
        )
        return "\n".join(lines) + "\n"


class StreamServer:
    """The server itself; ``serve()`` runs it on the current event loop."""

    def __init__(
        self,
        *,
        script: Script | None = None,
        engine: Engine | None = None,
        model: str = "scripted",
        precise: bool = True,
        log_bodies: bool = False,
    ):
        self.script = script or Script()
        self.log_bodies = log_bodies  # keep each request's messages/prompt in the log (tests of content)
        self.engine = engine
        self.model = model
        self.precise = precise  # spin the last millisecond before a scripted chunk
        self.log: list[dict[str, Any]] = []
        self.counters = _Counters()
        # Scripted lines appended to /metrics (vLLM's KV-cache gauges, preemptions,
        # cache_config_info): a string, or a callable called per scrape (a series over a run).
        self.metrics_extra: str | Callable[[], str] = ""
        self.port: int | None = None
        self._server: asyncio.AbstractServer | None = None
        self._next_id = 0

    async def serve(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen and serve until cancelled."""
        await self.listen(host=host, port=port)
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    async def listen(self, *, host: str = "127.0.0.1", port: int = 0) -> int:
        self._server = await asyncio.start_server(self._connection, host, port, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    # -- HTTP plumbing ----------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                t_recv = time.perf_counter()
                try:
                    method, target, _version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
                except ValueError:
                    return
                headers: dict[str, str] = {}
                while True:
                    raw = await reader.readline()
                    if raw in (b"\r\n", b"\n", b""):
                        break
                    key, _, value = raw.decode("latin-1").partition(":")
                    headers[key.strip().lower()] = value.strip()
                body = await self._read_body(reader, headers)
                keep = await self._dispatch(method, target.split("?", 1)[0], headers, body, writer, t_recv)
                if not keep or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            return  # the server is shutting down: nothing left to tell this client
        finally:
            writer.close()

    @staticmethod
    async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int((await reader.readline()).strip() or b"0", 16)
                if size == 0:
                    await reader.readline()
                    return b"".join(parts)
                parts.append(await reader.readexactly(size))
                await reader.readline()
        length = int(headers.get("content-length") or 0)
        return await reader.readexactly(length) if length else b""

    @staticmethod
    def _head(status: int, content_type: str, *, length: int | None, extra: str = "") -> bytes:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}.get(
            status, "Status"
        )
        framing = f"Content-Length: {length}\r\n" if length is not None else "Transfer-Encoding: chunked\r\n"
        return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n{framing}{extra}\r\n").encode(
            "latin-1"
        )

    async def _send(self, writer: asyncio.StreamWriter, status: int, payload: Any, content_type: str) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        writer.write(self._head(status, content_type, length=len(data)) + data)
        await writer.drain()

    async def _send_error(self, writer: asyncio.StreamWriter, status: int, message: str) -> None:
        # vLLM's error body shape.
        error = {"error": {"message": message, "type": "BadRequestError", "param": None, "code": status}}
        await self._send(writer, status, error, "application/json")

    async def _dispatch(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        writer: asyncio.StreamWriter,
        t_recv: float,
    ) -> bool:
        if method == "GET" and path in ("/health", "/ping"):
            await self._send(writer, 200, b"", "text/plain")
        elif method == "GET" and path == "/version":
            await self._send(writer, 200, {"version": "stream-server"}, "application/json")
        elif method == "GET" and path == "/v1/models":
            models = {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "owned_by": "specreview"}],
            }
            await self._send(writer, 200, models, "application/json")
        elif method == "GET" and path == "/metrics":
            extra = self.metrics_extra() if callable(self.metrics_extra) else self.metrics_extra
            page = self.counters.prometheus(model=self.model) + extra
            await self._send(writer, 200, page.encode(), "text/plain")
        elif method == "GET" and path == "/_log":
            await self._send(writer, 200, {"requests": self.log}, "application/json")
        elif method == "POST" and path == "/_reset":
            self.log = []
            await self._send(writer, 200, {"ok": True}, "application/json")
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return await self._generate(path, headers, body, writer, t_recv)
        else:
            await self._send_error(writer, 404, f"no route for {method} {path}")
        return True

    # -- generation -------------------------------------------------------------------------

    async def _generate(
        self, path: str, headers: dict[str, str], raw: bytes, writer: asyncio.StreamWriter, t_recv: float
    ) -> bool:
        self._next_id += 1
        record: dict[str, Any] = {
            "request_id": headers.get("x-request-id"),
            "path": path,
            "recv_s": t_recv,
            "chunk_s": [],
            "chunk_tokens": [],
            "end_s": None,
            "status": 200,
            "authorization": headers.get("authorization"),
            "peer_port": (writer.get_extra_info("peername") or (None, None))[1],
        }
        self.log.append(record)
        if len(self.log) > MAX_LOG:
            del self.log[: MAX_LOG // 2]  # a long-running demo server must not grow forever
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as exc:
            record["status"] = 400
            await self._send_error(writer, 400, f"invalid JSON body: {exc}")
            return True
        spec_level: str | None = None
        send_usage, scripted_prompt_tokens = True, None
        if self.log_bodies:
            record["messages"], record["prompt"] = body.get("messages"), body.get("prompt")
        if self.engine is not None:
            chunks: AsyncIterator[Chunk] = self._engine_chunks(body)
        else:
            text = _prompt_text(body)
            try:
                script = (
                    script_parse(data=json.loads(text[len(SCRIPT_PREFIX) :]), default=self.script)
                    if text.startswith(SCRIPT_PREFIX)
                    else self.script
                )
            except (ValueError, TypeError) as exc:
                record["status"] = 400
                await self._send_error(writer, 400, f"bad script: {exc}")
                return True
            if script.status != 200:
                record["status"] = script.status
                await self._send_error(writer, script.status, script.message)
                return True
            chunks = self._scripted_chunks(script, t_recv)
            spec_level = script.spec_metrics
            send_usage, scripted_prompt_tokens = script.usage, script.prompt_tokens
        chat = path.endswith("chat/completions")
        stream = bool(body.get("stream"))
        options = body.get("stream_options") or {}
        cid = f"{'chatcmpl' if chat else 'cmpl'}-{self._next_id}"
        common = {"id": cid, "created": int(time.time()), "model": body.get("model") or self.model}
        common["object"] = "chat.completion.chunk" if chat else "text_completion"
        prompt_tokens = (
            scripted_prompt_tokens if scripted_prompt_tokens is not None else len(_prompt_text(body).split())
        )
        completion_tokens = 0
        texts: list[str] = []
        ids: list[int] = []
        steps: list[tuple[int, int]] = []
        finish = None
        if stream:
            writer.write(
                self._head(200, "text/event-stream", length=None, extra="Cache-Control: no-cache\r\n")
            )
            if chat:
                # vLLM opens a chat stream with an event that carries only the role.
                role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                self._write_event(
                    writer, b"data: " + json.dumps({**common, "choices": [role]}).encode() + b"\n\n"
                )
        try:
            async for chunk in chunks:
                if isinstance(chunk, _Malformed):
                    record["chunk_s"].append(time.perf_counter())
                    record["chunk_tokens"].append(0)
                    self._write_event(writer, b'data: {"choices": [\n\n')
                    await writer.drain()
                    return False
                if isinstance(chunk, _Drop):
                    record["end_s"] = time.perf_counter()
                    writer.transport.abort()
                    return False
                completion_tokens += len(chunk.token_ids)
                texts.append(chunk.text)
                ids += chunk.token_ids
                finish = chunk.finish_reason
                self.counters.add_step(drafted=chunk.drafted, accepted=chunk.accepted)
                if chunk.drafted:
                    steps.append((chunk.drafted, chunk.accepted or 0))
                self.counters.generation_tokens += len(chunk.token_ids)
                if not stream:
                    continue
                choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": chunk.finish_reason}
                if chat:
                    choice["delta"] = {"content": chunk.text}
                else:
                    choice["text"] = chunk.text
                if body.get("return_token_ids"):
                    choice["token_ids"] = chunk.token_ids
                event = {**common, "choices": [choice]}
                if options.get("continuous_usage_stats") and send_usage:
                    event["usage"] = _usage(prompt_tokens, completion_tokens)
                data = b"data: " + json.dumps(event).encode() + b"\n\n"
                record["chunk_s"].append(time.perf_counter())
                record["chunk_tokens"].append(len(chunk.token_ids))
                self._write_event(writer, data)
                await writer.drain()
        except EngineError as exc:
            record["status"] = 500
            if not stream:
                await self._send_error(writer, 400 if not exc.transient else 500, str(exc))
                return True
            error = {"error": {"message": str(exc), "type": "EngineError", "code": 500}}
            self._write_event(writer, b"data: " + json.dumps(error).encode() + b"\n\n")
        record["end_s"] = time.perf_counter()
        self.counters.requests_finished += 1
        if not stream:
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": "".join(texts)}}
            else:
                choice = {"index": 0, "text": "".join(texts)}
            choice["finish_reason"] = finish
            if body.get("return_token_ids"):
                choice["token_ids"] = ids
            obj = "chat.completion" if chat else "text_completion"
            full = {
                **common,
                "object": obj,
                "choices": [choice],
                "usage": _usage(prompt_tokens, completion_tokens),
            }
            await self._send(writer, 200, full, "application/json")
            return True
        if options.get("include_usage") and send_usage:
            usage_event: dict[str, Any] = {
                **common,
                "choices": [],
                "usage": _usage(prompt_tokens, completion_tokens),
            }
            if spec_level in ("summary", "detailed"):
                spec = _spec_metrics(steps, detailed=spec_level == "detailed")
                usage_event["metrics"] = {"speculative_decoding": spec}
            self._write_event(writer, b"data: " + json.dumps(usage_event).encode() + b"\n\n")
        self._write_event(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    @staticmethod
    def _write_event(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    async def _scripted_chunks(self, script: Script, t_recv: float) -> AsyncIterator[Chunk]:
        position = 0
        offsets = script.offsets()
        for index, (n_tokens, offset) in enumerate(zip(script.tokens, offsets, strict=False)):
            if script.drop_after is not None and index >= script.drop_after:
                yield _Drop([], "", 0.0)
                return
            if script.malformed_after is not None and index >= script.malformed_after:
                yield _Malformed([], "", 0.0)
                return
            await self._sleep_until(t_recv + offset)
            ids = list(range(TOKEN_ID_BASE + position, TOKEN_ID_BASE + position + n_tokens))
            position += n_tokens
            last = index == len(script.tokens) - 1
            yield (
                Chunk(
                    token_ids=ids,
                    text="".join(f" t{i - TOKEN_ID_BASE}" for i in ids),
                    t=time.perf_counter(),
                    drafted=_at(script.drafted, index),
                    accepted=_at(script.accepted, index),
                    finish_reason=script.finish_reason if last else None,
                )
            )

    async def _engine_chunks(self, body: dict[str, Any]) -> AsyncIterator[Chunk]:
        assert self.engine is not None
        prompt = body.get("prompt")
        request = EngineRequest(
            request_id=f"srv-{self._next_id}",
            max_tokens=int(body.get("max_completion_tokens") or body.get("max_tokens") or 16),
            prompt=prompt[0] if isinstance(prompt, list) else prompt,
            messages=body.get("messages"),
            temperature=float(body.get("temperature", 0.0) or 0.0),
            top_p=float(body.get("top_p", 1.0) or 1.0),
            seed=body.get("seed"),
            response_format=body.get("response_format"),
            tools=body.get("tools"),
        )
        async for chunk in self.engine.stream(request):
            yield chunk

    async def _sleep_until(self, target: float) -> None:
        while True:
            remaining = target - time.perf_counter()
            if remaining <= 0:
                return
            if not self.precise or remaining > 0.0015:
                await asyncio.sleep(remaining - 0.001 if self.precise else remaining)
            else:
                await asyncio.sleep(0)


class _Drop(Chunk):
    pass


class _Malformed(Chunk):
    pass


def _at(values: list[int | None] | None, index: int) -> int | None:
    return values[index] if values and index < len(values) else None


def _spec_metrics(steps: list[tuple[int, int]], *, detailed: bool) -> dict[str, Any]:
    """vLLM's per-request ``SpeculativeDecodingMetrics`` (vllm 0.32,
    ``vllm/v1/metrics/stats.py::RequestSpecDecodeMetrics.to_dict``) for these steps."""
    k = max((d for d, _ in steps), default=0)
    histogram = [0] * (k + 1)
    for _, a in steps:
        histogram[a] += 1
    drafted, accepted = sum(d for d, _ in steps), sum(a for _, a in steps)
    out: dict[str, Any] = {
        "mean_acceptance_length": 1 + accepted / len(steps) if steps else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": histogram,
        "num_spec_steps": len(steps),
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted,
        "num_spec_tokens": k,
    }
    if detailed and steps:
        out["per_step_accepted"] = [a for _, a in steps]
        out["per_step_drafted"] = [d for d, _ in steps]
    return out


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


# -- running it -------------------------------------------------------------------------------


class _ServerAddress:
    """The URLs of a server listening on ``host``:``port``."""

    host: str
    port: int

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"


class ServerThread(_ServerAddress):
    """A StreamServer on its own event loop in a daemon thread of this process.

    Use it to wrap an in-process engine; for timing measurements prefer
    :func:`stream_server_spawn`, whose process does not share the GIL with the client.
    """

    def __init__(self, server: StreamServer, *, host: str = "127.0.0.1", port: int = 0):
        self.server = server
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def main() -> None:
            await server.listen(host=host, port=port)
            ready.set()
            assert server._server is not None
            await server._server.serve_forever()

        self._thread = threading.Thread(target=self._run, args=(main,), daemon=True, name="stream-server")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("stream server did not start within 10 s")
        self.host = host
        self.port = server.port

    def _run(self, main: Any) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(main())
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        finally:
            self._loop.close()

    def requests(self) -> list[dict[str, Any]]:
        return list(self.server.log)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._task.cancel)
            self._thread.join(10)


def stream_server_start(
    *,
    script: Script | None = None,
    engine: Engine | None = None,
    model: str = "scripted",
    host: str = "127.0.0.1",
    port: int = 0,
) -> ServerThread:
    """Start a StreamServer in a thread of this process and return once it listens."""
    return ServerThread(StreamServer(script=script, engine=engine, model=model), host=host, port=port)


class ServerProcess(_ServerAddress):
    """A StreamServer in a child process (see :func:`stream_server_spawn`)."""

    def __init__(self, proc: subprocess.Popen[str], host: str, port: int):
        self.proc = proc
        self.host = host
        self.port = port

    def requests(self) -> list[dict[str, Any]]:
        """The server's request log: one dict per generation request, perf_counter seconds."""
        import httpx

        return httpx.get(f"{self.root_url}/_log", timeout=60).json()["requests"]

    def reset(self) -> None:
        import httpx

        httpx.post(f"{self.root_url}/_reset", timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()


def stream_server_spawn(
    *,
    script: Script | None = None,
    model: str = "scripted",
    host: str = "127.0.0.1",
    port: int = 0,
    engine: str | None = None,
    target: str | None = None,
    engine_args: dict[str, Any] | None = None,
    speculative_config: dict[str, Any] | None = None,
    start_timeout_s: float = 300.0,
    log_bodies: bool = False,
) -> ServerProcess:
    """Start a StreamServer in a child process; return once it listens.

    ``engine``/``target`` start an engine of that kind in the child (engine mode);
    otherwise the child serves ``script`` to every request without a script of its own.
    """
    script = script or Script()
    cmd = [sys.executable, "-m", "tests.support.stream_server", "--host", host, "--port", str(port)]
    cmd += ["--model", model, "--script", json.dumps(script.__dict__)]
    if engine:
        cmd += ["--engine", engine, "--target", target or model]
        cmd += ["--engine-args", json.dumps(engine_args or {})]
        cmd += ["--speculative-config", json.dumps(speculative_config)]
    if log_bodies:
        cmd += ["--log-bodies"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # cwd: the checkout this module lives in, so ``-m tests.support.stream_server`` resolves there
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert proc.stdout is not None
    line = _readline_with_timeout(proc, start_timeout_s)
    if not line.startswith("LISTENING "):
        proc.kill()
        raise RuntimeError(f"stream server did not start: {line!r}")
    return ServerProcess(proc, host, int(line.split()[1]))


def _readline_with_timeout(proc: subprocess.Popen[str], timeout_s: float) -> str:
    box: list[str] = []
    reader = threading.Thread(
        target=lambda: box.append(proc.stdout.readline() if proc.stdout else ""), daemon=True
    )
    reader.start()
    reader.join(timeout_s)
    if not box:
        proc.kill()
        raise RuntimeError(f"stream server printed nothing within {timeout_s} s")
    return box[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--script", default="{}", help="default script as JSON (see Script)")
    parser.add_argument("--engine", help="serve a real engine of this kind instead of scripts")
    parser.add_argument("--target", help="the engine's target model")
    parser.add_argument("--engine-args", default="{}")
    parser.add_argument("--speculative-config", default="null")
    parser.add_argument("--log-bodies", action="store_true", help="log each request's messages/prompt")
    args = parser.parse_args(argv)
    engine = None
    if args.engine:
        from workers.engines import EngineConfig, engine_create

        engine = engine_create(args.engine)
        engine.start(
            EngineConfig(
                engine=args.engine,
                target_model=args.target,
                engine_args=json.loads(args.engine_args),
                speculative_config=json.loads(args.speculative_config),
            )
        )
    server = StreamServer(
        script=script_parse(data=json.loads(args.script), default=Script()),
        engine=engine,
        log_bodies=args.log_bodies,
    )
    server.model = args.model

    from workers.replay.timing import LATENCY_SLICE_S, sched_slice_set

    # The server is the benchmarks' clock: let it run as soon as a request arrives.
    sched_slice_set(slice_s=LATENCY_SLICE_S)

    async def run() -> None:
        port = await server.listen(host=args.host, port=args.port)
        assert server._server is not None
        serving = asyncio.ensure_future(server._server.serve_forever())
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, serving.cancel)
        print(f"LISTENING {port}", flush=True)
        try:
            await serving
        except asyncio.CancelledError:
            pass

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    finally:
        if engine is not None:
            engine.stop()


if __name__ == "__main__":
    main()
