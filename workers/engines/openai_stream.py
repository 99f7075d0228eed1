"""What the openai engine sends and how it reads the answer: request bodies and SSE streams.

A request becomes one JSON body for ``/chat/completions`` or ``/completions``: streamed, with
usage; vLLM's extensions (token ids, continuous usage stats) only for a server known to be vLLM,
unless a config says otherwise. The answer is Server-Sent Events: every event that carries
output becomes one :class:`OpenAIChunk`, timestamped with the ``time.perf_counter()`` (seconds)
at which its line arrived; the last event's per-request spec-decode metrics become one empty
chunk per verification step (or one carrying the totals). A stream may end with ``[DONE]`` or,
as ``transformers serve`` does, right after the event carrying ``finish_reason``. Streamed tool
calls become ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` text, the form the hf
and vllm engines emit for Qwen-style models and the quality check reads. Error bodies come back
as their human part, scrubbed of credentials, naming a refused request field and how to switch
it off.
"""

from __future__ import annotations

import ast
import json
import re
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

    When the server told neither, ``num_tokens`` is an estimate: one per event with text, the final
    usage's total correcting the sum (see the openai_http module docstring).
    """

    num_tokens: int | None = None
    spec_totals: dict[str, int] | None = None


@dataclass
class StreamStats:
    """What an engine's streams have done so far: ``ended_without_done`` counts the streams that
    ended after their ``finish_reason`` event with no ``[DONE]`` line (accepted, recorded)."""

    streams: int = 0
    ended_without_done: int = 0
    estimated_counts: int = 0  # streams whose per-chunk token counts are estimates (no ids, no running count)


# The fields this engine sends that a server may refuse, and how to switch each off.
_FIELD_SWITCH = {
    "return_token_ids": "engine_args.return_token_ids: false",
    "stream_options.continuous_usage_stats": "engine_args.continuous_usage_stats: false",
    "continuous_usage_stats": "engine_args.continuous_usage_stats: false",
}
_VLLM_ONLY = {"return_token_ids", "stream_options.continuous_usage_stats", "continuous_usage_stats"}
# Plain-text shapes naming refused fields: transformers serve ("Unexpected fields in the
# request: {'return_token_ids'}"), OpenAI ("Unrecognized request argument supplied: x").
_FIELD_TEXT = (
    re.compile(r"Unexpected fields? in the request: (?P<fields>\{[^}]*\}|\[[^\]]*\]|\S+)"),
    re.compile(r"Unrecognized request arguments? supplied: (?P<fields>[\w.]+(?:, [\w.]+)*)"),
    re.compile(
        r"(?:[Ee]xtra|[Uu]nknown|[Uu]nexpected|[Uu]nsupported) (?:field|parameter|argument)s?:? "
        r"['\"]?(?P<fields>[\w.]+)"
    ),
)


def error_message(raw: bytes) -> str:
    """The human part of an error body (OpenAI's and vLLM's shapes, else the raw text), cut to
    2 KiB and scrubbed of credentials: it ends up in run errors that viewers read. When the body
    says a request field was refused, the message names it and says how to switch it off."""
    raw = raw[:65536]
    text = _error_text(raw)
    fields = refused_fields(raw)
    if fields:
        text = f"{_refusal_hint(fields)} (the server said: {text})"
    return text_scrub(text)


def refused_fields(raw: bytes) -> list[str]:
    """The request fields an error body says the server refused (dotted paths below the body):
    from FastAPI/pydantic ``detail[].loc`` of an ``extra_forbidden`` error, or from the text of
    OpenAI-style and ``transformers serve`` messages. ``[]`` when it names none."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    out: list[str] = []
    detail = body.get("detail") if isinstance(body, dict) else None
    for item in detail if isinstance(detail, list) else []:
        loc = item.get("loc") if isinstance(item, dict) else None
        kind = str(item.get("type", "")) if isinstance(item, dict) else ""
        msg = str(item.get("msg", "")) if isinstance(item, dict) else ""
        if isinstance(loc, list) and ("extra" in kind or "not permitted" in msg):
            path = [str(p) for p in loc if p != "body"]
            if path:
                out.append(".".join(path))
    text = _error_text(raw)
    for pattern in _FIELD_TEXT:
        match = pattern.search(text)
        if match and not out:
            out.extend(_field_names(match.group("fields")))
    return list(dict.fromkeys(out))


def _field_names(text: str) -> list[str]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = [part.strip(" '\"") for part in text.split(",")]
    if isinstance(value, str):
        value = [value]
    return [str(v) for v in value if str(v)] if isinstance(value, set | list | tuple) else []


def _refusal_hint(fields: list[str]) -> str:
    parts = []
    for field in fields:
        switch = _FIELD_SWITCH.get(field)
        if switch:
            parts.append(
                f"the server refused field {field!r} (vLLM-only): set {switch}, or register the "
                'server with "kind": "openai" in SPECREVIEW_OPENAI_SERVERS so that only plain '
                "OpenAI fields are sent"
            )
        else:
            parts.append(
                f"the server refused field {field!r}: leave it out of engine_args.extra_body "
                "(or, if the trace sets it, the server cannot serve that request)"
            )
    return "; ".join(parts)


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
    *, config: EngineConfig, base_url: str, request: EngineRequest, server_kind: str = "unknown"
) -> tuple[str, dict[str, Any]]:
    """The URL and JSON body for one request to the server at ``base_url`` (``.../v1``).

    vLLM's extensions (``return_token_ids``, ``stream_options.continuous_usage_stats``) go only
    to a ``server_kind`` of ``vllm``; an explicit ``engine_args`` switch overrides either way.
    """
    args = config.engine_args
    vllm = server_kind == "vllm"
    endpoint = args.get("endpoint") or ("chat" if request.messages else "completions")
    body: dict[str, Any] = {
        "model": config.target_model,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if args.get("continuous_usage_stats", vllm):
        body["stream_options"]["continuous_usage_stats"] = True
    if args.get("return_token_ids", vllm):
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


async def sse_chunks(
    *, lines: AsyncIterator[tuple[str, float]], url: str, stats: StreamStats | None = None
) -> AsyncIterator[Chunk]:
    """The chunks of one streamed answer, from its body's lines and their arrival times
    (perf_counter seconds). Raises EngineError on a malformed event, an error event, or a stream
    that ends with neither ``[DONE]`` nor a ``finish_reason`` (transient). A stream that ends
    after its ``finish_reason`` without ``[DONE]`` is complete and counted in ``stats``."""
    tally = _Tally(url=url)
    ending: dict[str, bool] = {"done": False}
    async for event, data, t in _sse_events(lines=lines, url=url, ending=ending):
        for chunk in tally.chunks(event=event, data=data, t=t):
            yield chunk
    if stats is not None:
        stats.streams += 1
        stats.estimated_counts += tally.estimated
    if ending["done"]:
        return
    if not tally.finished:
        raise EngineError(
            f"the stream from {url} ended before any finish_reason and without [DONE]", transient=True
        )
    if stats is not None:
        stats.ended_without_done += 1


async def _sse_events(
    *, lines: AsyncIterator[tuple[str, float]], url: str, ending: dict[str, bool]
) -> AsyncIterator[tuple[dict[str, Any], str, float]]:
    """Each SSE event's JSON object, its raw data and the time its last line arrived;
    ``ending["done"]`` says whether ``[DONE]`` came."""
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
    ending["done"] = done


class _Tally:
    """What one stream has told so far (token counts, the prompt's length), turning its events
    into chunks."""

    def __init__(self, *, url: str):
        self.url = url
        self.tokens_so_far = 0  # completion tokens per continuous usage stats
        self.pending_prompt: int | None = None  # the server's usage.prompt_tokens, told once
        self.prompt_told = False
        self.finished = False  # an event carried a finish_reason
        self.open_call: Any = None  # the index of the streamed tool call whose text is open
        self.call_args = False  # the open call has had argument text
        self.calls = 0
        self.estimated = False  # some chunk's token count is the one-per-event estimate

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
        finish = choice.get("finish_reason")
        text = self._choice_text(choice)
        if finish is not None:
            self.finished = True
            text += self._call_close()
        token_ids = choice.get("token_ids")
        if isinstance(token_ids, list):
            num_tokens: int | None = len(token_ids)
        elif "completion_tokens" in usage:
            # A running count, or a plain server's final total reconciling the estimates below.
            num_tokens = max(int(usage["completion_tokens"]) - self.tokens_so_far, 0)
            token_ids = []
        else:
            # Neither ids nor a running count (a plain OpenAI server): one token per event with
            # text, as servers that stream token by token send them; the final usage's total
            # then corrects the sum. The analysis needs a count per chunk, never a hole.
            num_tokens, token_ids = (1 if text else 0), []
            self.estimated = True
            self.tokens_so_far += num_tokens
        if "completion_tokens" in usage:
            self.tokens_so_far = int(usage["completion_tokens"])
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

    def _choice_text(self, choice: dict[str, Any]) -> str:
        """The text one choice adds; a streamed tool call (``delta.tool_calls[]``: ``index``,
        ``function.name`` on its first delta, ``function.arguments`` in fragments) becomes
        ``<tool_call>\\n{"name": NAME, "arguments": ARGUMENTS}\\n</tool_call>``, opened at its first
        delta and closed at the next call, at content after it, or at the finish."""
        if "text" in choice:
            return choice.get("text") or ""
        delta = choice.get("delta") or {}
        parts = []
        content = delta.get("content") or ""
        if content:
            parts += [self._call_close(), content]
        for call in delta.get("tool_calls") or []:
            call = call if isinstance(call, dict) else {}
            function = call.get("function") or {}
            index = call.get("index", self.open_call if self.open_call is not None else self.calls)
            if self.open_call is None or index != self.open_call:
                parts.append(self._call_close())
                name = function.get("name") or ""
                parts.append(
                    ("\n" if self.calls else "") + f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": '
                )
                self.open_call, self.call_args, self.calls = index, False, self.calls + 1
            arguments = function.get("arguments")
            if arguments:
                self.call_args = True
                parts.append(arguments if isinstance(arguments, str) else json.dumps(arguments))
        return "".join(parts)

    def _call_close(self) -> str:
        if self.open_call is None:
            return ""
        text = ("" if self.call_args else "{}") + "}\n</tool_call>"
        self.open_call, self.call_args = None, False
        return text
