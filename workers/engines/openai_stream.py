"""What the openai engine sends and how it reads the answer: request bodies and SSE streams.

A request becomes one JSON body for ``/chat/completions`` or ``/completions`` (streamed, with
usage, and vLLM's token ids unless a config turns them off). The answer is Server-Sent Events:
every event that carries output becomes one :class:`OpenAIChunk`, timestamped with the
``time.perf_counter()`` (seconds) at which its line arrived; the last event's per-request
spec-decode metrics become one empty chunk per verification step (or one carrying the totals).
Error bodies come back as their human part, scrubbed of credentials.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from .base import Chunk, EngineConfig, EngineError, EngineRequest
from .openai_metrics import spec_request_metrics
from .redaction import text_scrub

# Status codes worth a retry: the server is busy, starting or briefly broken.
TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}


@dataclass
class OpenAIChunk(Chunk):
    """A Chunk that also says how many tokens it holds when the server sent counts but no ids.

    ``num_tokens`` is ``None`` when the server told neither (see the openai_http module docstring).
    """

    num_tokens: int | None = None
    spec_totals: dict[str, int] | None = None


def error_message(raw: bytes) -> str:
    """The human part of an error body (OpenAI's and vLLM's shapes, else the raw text), cut to
    2 KiB and scrubbed of credentials: it ends up in run errors that viewers read."""
    return text_scrub(_error_text(raw[:65536]))


def _error_text(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if body.get("message"):
            return str(body["message"])
        if body.get("detail"):
            return str(body["detail"])
    return json.dumps(body)


def request_body_build(
    *, config: EngineConfig, base_url: str, request: EngineRequest
) -> tuple[str, dict[str, Any]]:
    """The URL and JSON body for one request to the server at ``base_url`` (``.../v1``)."""
    args = config.engine_args
    endpoint = args.get("endpoint") or ("chat" if request.messages else "completions")
    body: dict[str, Any] = {
        "model": config.target_model,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if args.get("continuous_usage_stats", True):
        body["stream_options"]["continuous_usage_stats"] = True
    if args.get("return_token_ids", True):
        body["return_token_ids"] = True
    if request.seed is not None:
        body["seed"] = request.seed
    if request.response_format is not None:
        body["response_format"] = request.response_format
    if request.tools is not None:
        body["tools"] = request.tools
    if endpoint == "chat":
        body["messages"] = request.messages or [{"role": "user", "content": request.prompt or ""}]
        url = f"{base_url}/chat/completions"
    else:
        if request.messages:
            raise EngineError(
                f"request {request.request_id} has chat messages but engine_args.endpoint is "
                "'completions'; use endpoint 'chat'"
            )
        body["prompt"] = request.prompt or ""
        url = f"{base_url}/completions"
    body.update(args.get("extra_body") or {})
    return url, body


async def sse_chunks(*, lines: AsyncIterator[tuple[str, float]], url: str) -> AsyncIterator[Chunk]:
    """The chunks of one streamed answer, from its body's lines and their arrival times
    (perf_counter seconds). Raises EngineError on a malformed event, an error event, or a stream
    that ends without ``[DONE]`` (transient)."""
    tally = _Tally(url=url)
    async for event, data, t in _sse_events(lines=lines, url=url):
        for chunk in tally.chunks(event=event, data=data, t=t):
            yield chunk


async def _sse_events(
    *, lines: AsyncIterator[tuple[str, float]], url: str
) -> AsyncIterator[tuple[dict[str, Any], str, float]]:
    """Each SSE event's JSON object, its raw data and the time its last line arrived."""
    data_lines: list[str] = []
    done = False
    async for line, t in lines:
        if done:
            continue  # read to the end of the body so that the connection can be reused
        if line:
            if line.startswith("data:"):
                data_lines.append(line[5:].lstrip(" "))
            continue  # comments, event names and ids say nothing we use
        if not data_lines:
            continue
        data, data_lines = "\n".join(data_lines), []
        if data == "[DONE]":
            done = True
            continue
        try:
            event = json.loads(data)
        except ValueError as exc:
            raise EngineError(f"malformed SSE event from {url}: {data[:200]!r}") from exc
        if not isinstance(event, dict):
            raise EngineError(f"malformed SSE event from {url}: {data[:200]!r}")
        if event.get("error"):
            raise EngineError(f"the server failed the request mid-stream: {error_message(data.encode())}")
        yield event, data, t
    if not done:
        raise EngineError(f"the stream from {url} ended without [DONE]", transient=True)


class _Tally:
    """What one stream has told so far (token counts, the prompt's length), turning its events
    into chunks."""

    def __init__(self, *, url: str):
        self.url = url
        self.tokens_so_far = 0  # completion tokens per continuous usage stats
        self.pending_prompt: int | None = None  # the server's usage.prompt_tokens, told once
        self.prompt_told = False

    def chunks(self, *, event: dict[str, Any], data: str, t: float) -> Iterator[OpenAIChunk]:
        url = self.url
        usage = event.get("usage") or {}
        if (
            not self.prompt_told
            and self.pending_prompt is None
            and isinstance(usage.get("prompt_tokens"), int)
        ):
            # The server's own count of the templated prompt (stream_options.include_usage):
            # told with the next chunk, or on an empty one from the final usage-only event.
            self.pending_prompt = int(usage["prompt_tokens"])
        choices = event.get("choices") or []
        metrics = event.get("metrics")
        spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        if spec is not None:
            # vLLM's per-request spec-decode metrics: on the stream's last event only.
            steps, totals = spec_request_metrics(metrics=spec, where=f"the last SSE event from {url}")
            for drafted, accepted in steps or []:
                yield OpenAIChunk(
                    token_ids=[], text="", t=t, drafted=drafted, accepted=accepted, num_tokens=0
                )
            if steps is None:
                yield OpenAIChunk(token_ids=[], text="", t=t, num_tokens=0, spec_totals=totals)
        if not choices:
            if self.pending_prompt is not None:
                yield OpenAIChunk(token_ids=[], text="", t=t, num_tokens=0, prompt_tokens=self.pending_prompt)
                self.pending_prompt, self.prompt_told = None, True
            return
        choice = choices[0]
        if not isinstance(choice, dict):
            raise EngineError(f"malformed SSE event from {url}: {data[:200]!r}")
        text = _choice_text(choice)
        token_ids = choice.get("token_ids")
        if isinstance(token_ids, list):
            num_tokens: int | None = len(token_ids)
        elif "completion_tokens" in usage:
            num_tokens = int(usage["completion_tokens"]) - self.tokens_so_far
            token_ids = []
        else:
            num_tokens, token_ids = None, []
        if "completion_tokens" in usage:
            self.tokens_so_far = int(usage["completion_tokens"])
        finish = choice.get("finish_reason")
        if not text and not num_tokens and finish is None:
            return  # vLLM's first chat event carries only the role
        yield OpenAIChunk(
            token_ids=[int(i) for i in token_ids],
            text=text,
            t=t,
            finish_reason=finish,
            num_tokens=num_tokens if (text or num_tokens) else 0,
            prompt_tokens=self.pending_prompt,
        )
        if self.pending_prompt is not None:
            self.pending_prompt, self.prompt_told = None, True


def _choice_text(choice: dict[str, Any]) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    parts = [delta.get("content") or ""]
    for call in delta.get("tool_calls") or []:
        parts.append(((call or {}).get("function") or {}).get("arguments") or "")
    return "".join(parts)
