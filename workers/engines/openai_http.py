"""The ``openai`` engine: any OpenAI-compatible server (vLLM serve, SGLang, TensorRT-LLM).

Requests stream over HTTP/1.1 Server-Sent Events with httpx; every SSE event that carries
output becomes one :class:`Chunk`, timestamped with ``time.perf_counter()`` when its line
arrived. Spec-decode counters come from the server's Prometheus ``/metrics`` (vLLM's
``vllm:spec_decode_*`` counters), scraped by ``counters()`` before and after a run so the
run records deltas.

What the server does not send, the engine cannot know:

- token ids per chunk need vLLM's ``return_token_ids`` (sent by default; set
  ``return_token_ids: false`` for servers that refuse unknown fields). Without ids, the
  token count per chunk comes from vLLM's ``continuous_usage_stats``; without either, only
  the total from the final ``usage`` is known and per-chunk counts are ``None``.
- drafted/accepted per step come only from vLLM's per-request spec-decode metrics (``vllm
  serve --per-request-spec-decode-metrics detailed``): the last event of a stream carries
  ``metrics.speculative_decoding`` with ``per_step_drafted``/``per_step_accepted``, and the
  engine yields one empty chunk per step carrying them, so the request's record holds the same
  per-step lists the ``hf`` and ``vllm`` engines produce. At the ``summary`` level only the
  request's totals come (``num_spec_steps``, ``num_draft_tokens``,
  ``num_accepted_draft_tokens``): the last chunk carries them as ``spec_totals``. Without
  either (other servers, or the flag off) only the run-wide counter deltas from ``/metrics``
  are available, and chunks carry ``drafted=None``.
- the server's memory is what its ``/metrics`` exposes (``process_resident_memory_bytes``
  of the API process, KV-cache usage), not the GPU memory of its engine process.

``engine_args``:
``server`` (the name of a server the operator registered in ``SPECREVIEW_OPENAI_SERVERS``)
or ``base_url`` (accepted only when it is a registered server's URL); no other server is
reachable. The API key comes with the server's registration (a named credential in
``SPECREVIEW_OPENAI_CREDENTIALS``, read on the worker); ``credential`` may repeat that name.
A literal ``api_key`` or an ``api_key_env`` variable name is refused. ``endpoint`` (``chat`` |
``completions``; default: chat when the request has messages), ``timeout_s`` (longest
silence while streaming, default 600), ``connect_timeout_s`` (default 10), ``metrics_url``
(default: the server's URL without ``/v1`` plus ``/metrics``; ``""`` disables scraping; any
other value must be on the server's own scheme, host and port),
``max_connections`` (default: no cap), ``return_token_ids`` (default true),
``continuous_usage_stats`` (default true), ``extra_body`` (merged into every request body),
``check_server`` (default true: ``start()`` lists the server's models).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeGuard
from urllib.parse import urlsplit

import httpx

from .base import Chunk, EngineConfig, EngineError, EngineRequest
from .redaction import text_scrub
from .servers import credential_value, openai_server_for

ENGINE_ARGS = {
    "server",
    "base_url",
    "credential",
    "endpoint",
    "timeout_s",
    "connect_timeout_s",
    "metrics_url",
    "max_connections",
    "return_token_ids",
    "continuous_usage_stats",
    "extra_body",
    "check_server",
    "transport",
}

# Keys a config may not carry: the key comes with the server's registration.
REFUSED_ARGS = {
    "api_key": "a literal key is never stored in a config",
    "api_key_env": "a config cannot choose which worker environment variable to send",
}

# Status codes worth a retry: the server is busy, starting or briefly broken.
TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}

# vLLM's spec-decode counters (V1 names), without the ``_total`` suffix prometheus_client adds.
SPEC_COUNTERS = (
    "spec_decode_num_drafts",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
    "spec_decode_num_emitted_tokens",  # vLLM V0 only
)
PER_POS_COUNTER = "spec_decode_num_accepted_tokens_per_pos"
SERVER_GAUGES = {
    "process_resident_memory_bytes": "server_rss_bytes",
    "vllm:kv_cache_usage_perc": "kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage_perc",
}

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class OpenAIChunk(Chunk):
    """A Chunk that also says how many tokens it holds when the server sent counts but no ids.

    ``num_tokens`` is ``None`` when the server told neither (see the module docstring).
    """

    num_tokens: int | None = None
    spec_totals: dict[str, int] | None = None


# The totals of vLLM's per-request spec-decode metrics (``metrics.speculative_decoding``), at
# both levels, under the names this project stores them by.
SPEC_REQUEST_TOTALS = {
    "num_spec_steps": "drafts",
    "num_draft_tokens": "draft_tokens",
    "num_accepted_draft_tokens": "accepted",
}


def spec_request_metrics(*, metrics: Any, where: str) -> tuple[list[tuple[int, int]] | None, dict[str, int]]:
    """vLLM's per-request ``metrics.speculative_decoding`` as (steps, totals).

    ``steps`` is ``[(drafted, accepted), ...]`` per verification step (the ``detailed``
    level's ``per_step_drafted``/``per_step_accepted``), ``None`` at the ``summary`` level;
    ``totals`` is ``{"drafts", "draft_tokens", "accepted"}`` (tokens; drafts are verification
    steps that proposed tokens). Raises EngineError, saying ``where``, on a block whose counts
    are not counts or do not add up: a server that says what it cannot have done is not
    measured, it is wrong.
    """
    if not isinstance(metrics, dict):
        raise EngineError(f"{where}: metrics.speculative_decoding must be an object, got {type(metrics).__name__}")
    totals: dict[str, int] = {}
    for name, key in SPEC_REQUEST_TOTALS.items():
        value = metrics.get(name)
        if not _count(value):
            raise EngineError(f"{where}: metrics.speculative_decoding.{name} must be a count, got {value!r}")
        totals[key] = int(value)
    if totals["accepted"] > totals["draft_tokens"]:
        raise EngineError(
            f"{where}: metrics.speculative_decoding accepts {totals['accepted']} of "
            f"{totals['draft_tokens']} draft tokens"
        )
    drafted, accepted = metrics.get("per_step_drafted"), metrics.get("per_step_accepted")
    if drafted is None and accepted is None:
        return None, totals
    if not (isinstance(drafted, list) and isinstance(accepted, list)) or not all(
        _count(v) for v in [*drafted, *accepted]
    ):
        raise EngineError(f"{where}: metrics.speculative_decoding.per_step_drafted/_accepted must be lists of counts")
    steps = list(zip(drafted, accepted, strict=False))
    if (
        len(drafted) != len(accepted)
        or len(steps) != totals["drafts"]
        or sum(drafted) != totals["draft_tokens"]
        or sum(accepted) != totals["accepted"]
        or any(a > d for d, a in steps)
    ):
        raise EngineError(
            f"{where}: metrics.speculative_decoding's per-step lists ({len(drafted)} drafted, "
            f"{len(accepted)} accepted) do not add up to its totals {totals}"
        )
    return [(int(d), int(a)) for d, a in steps], totals


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def prometheus_samples(*, text: str) -> list[tuple[str, dict[str, str], float]]:
    """Parse Prometheus text exposition into (name, labels, value) samples. ``NaN`` and
    ``+Inf``/``-Inf`` (legal in the format) are no measurement and are left out: they would
    break the counts and cannot be stored as JSON."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, raw_labels, raw_value = match.groups()
        try:
            value = float(raw_value)
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(raw_labels or "")}
        samples.append((name, labels, value))
    return samples


def prometheus_spec_counters(*, text: str) -> dict[str, Any]:
    """vLLM's spec-decode counters from a ``/metrics`` page, summed over engines and models.

    Returns counts in tokens (drafts in verification steps) keyed by the counter's name
    without its ``vllm:`` prefix and ``_total`` suffix; ``..._per_pos`` is a list indexed
    by draft position. vLLM registers its spec-decode counters only when it was started with
    a speculative config, so a vLLM page (any ``vllm:`` sample) without them is a server that
    does not speculate: its totals read 0 and ``spec_decode`` says ``"not configured"``. A
    page of another server without them leaves them absent (not measured).
    """
    out: dict[str, Any] = {}
    per_pos: dict[int, float] = {}
    samples = prometheus_samples(text=text)
    if any(name.startswith("vllm:") for name, _, _ in samples) and not any(
        name.startswith("vllm:spec_decode_") for name, _, _ in samples
    ):
        out = {key: 0 for key in SPEC_COUNTERS[:3]} | {"spec_decode": "not configured"}
    for name, labels, value in samples:
        if name.endswith("_created"):
            continue
        if name in SERVER_GAUGES:
            out[SERVER_GAUGES[name]] = out.get(SERVER_GAUGES[name], 0) + value
            continue
        if not name.startswith("vllm:"):
            continue
        base = name[len("vllm:") :].removesuffix("_total")
        if base == PER_POS_COUNTER:
            position = int(labels.get("position", "0"))
            per_pos[position] = per_pos.get(position, 0.0) + value
        elif base in SPEC_COUNTERS:
            out[base] = out.get(base, 0) + value
    for key in SPEC_COUNTERS:
        if key in out:
            out[key] = int(out[key])
    if per_pos:
        out[PER_POS_COUNTER] = [int(per_pos.get(i, 0)) for i in range(max(per_pos) + 1)]
    return out


# vLLM's KV-cache and scheduler gauges (V1 names; vllm/v1/metrics/loggers.py) and what they are stored as.
KV_GAUGES = {
    "vllm:kv_cache_usage_perc": "kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage_perc",  # before vLLM 0.10
    "vllm:num_requests_running": "num_requests_running",
    "vllm:num_requests_waiting": "num_requests_waiting",
}
# ``vllm:cache_config_info``: an info gauge whose labels are CacheConfig's fields as strings.
CACHE_CONFIG_LABELS = {
    "kv_cache_size_tokens": "kv_cache_tokens",
    "num_gpu_blocks": "kv_blocks",
    "num_cpu_blocks": "kv_cpu_blocks",
    "block_size": "block_size",
}


def prometheus_kv_state(*, text: str) -> dict[str, Any]:
    """KV-cache state from a vLLM ``/metrics`` page: ``kv_cache_usage_perc`` (fraction 0-1, mean
    over engines), ``num_requests_running``/``num_requests_waiting`` (summed over engines),
    ``num_preemptions`` (counter total), and the capacity from ``vllm:cache_config_info`` where
    the server exports it: ``kv_cache_tokens`` (``kv_cache_size_tokens``, else blocks x block
    size), ``kv_blocks``, ``kv_cpu_blocks``, ``block_size``. Keys a page
    lacks are absent: a server that does not say is not measured."""
    out: dict[str, Any] = {}
    usage: list[float] = []
    engines: list[dict[str, Any]] = []
    for name, labels, value in prometheus_samples(text=text):
        key = KV_GAUGES.get(name)
        if key == "kv_cache_usage_perc":
            usage.append(value)
        elif key:
            out[key] = out.get(key, 0) + int(value)
        elif name in ("vllm:num_preemptions_total", "vllm:num_preemptions"):
            out["num_preemptions"] = out.get("num_preemptions", 0) + int(value)
        elif name == "vllm:cache_config_info":
            engines.append({k: _label_int(labels.get(label)) for label, k in CACHE_CONFIG_LABELS.items()})
    if usage:
        out["kv_cache_usage_perc"] = sum(usage) / len(usage)
    for engine in engines:
        if engine["kv_cache_tokens"] is None and engine["kv_blocks"] and engine["block_size"]:
            engine["kv_cache_tokens"] = engine["kv_blocks"] * engine["block_size"]
    for key in CACHE_CONFIG_LABELS.values():
        # Every engine's info gauge carries the front end's one CacheConfig: read it once.
        known = [e[key] for e in engines if e[key] is not None]
        if engines:
            out[key] = max(known) if known else None
    return out


def _label_int(raw: str | None) -> int | None:
    """A cache_config_info label as an int: vLLM writes ``str(value)``, so "None" when unset."""
    try:
        return int(float(raw)) if raw not in (None, "", "None") else None  # type: ignore[arg-type]
    except ValueError:
        return None


def _error_message(raw: bytes) -> str:
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


class OpenAIEngine:
    kind = "openai"

    def __init__(self) -> None:
        self.config: EngineConfig | None = None
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._server_version: str | None = None
        self._pool: _Pool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._server: dict[str, str] = {}

    @classmethod
    def validate(cls, config: EngineConfig) -> dict[str, str]:
        """:func:`openai_config_validate` (for experiment forms: nothing is contacted)."""
        return openai_config_validate(config=config)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, config: EngineConfig) -> None:
        """Check the config and that the server answers; nothing is loaded here.

        Raises EngineError: permanent for a bad config, a rejected key or a model the
        server does not serve; transient when the server cannot be reached.
        """
        # Again here, not only at creation: a config stored before servers were registered
        # must not reach an unregistered address either.
        self._server = openai_config_validate(config=config)
        self.config = config
        args = config.engine_args
        if args.get("check_server", True):
            self._check_server()

    def _args(self) -> dict[str, Any]:
        if self.config is None:
            raise EngineError("the openai engine was not started")
        return self.config.engine_args

    @property
    def base_url(self) -> str:
        self._args()
        return self._server["url"]

    @property
    def metrics_url(self) -> str:
        args = self._args()
        if "metrics_url" in args:
            return str(args["metrics_url"] or "")
        return self.base_url.removesuffix("/v1") + "/metrics"

    def _headers(self) -> dict[str, str]:
        self._args()
        name = self._server.get("credential")
        return {"Authorization": f"Bearer {credential_value(name=name)}"} if name else {}

    def _timeout(self) -> httpx.Timeout:
        args = self._args()
        read = float(args.get("timeout_s", 600))
        return httpx.Timeout(read, connect=float(args.get("connect_timeout_s", 10)))

    def _check_server(self) -> None:
        url = f"{self.base_url}/models"
        try:
            response = httpx.get(url, headers=self._headers(), timeout=self._timeout())
        except httpx.TransportError as exc:
            raise EngineError(f"cannot reach the server at {url}: {exc}", transient=True) from exc
        if response.status_code in (401, 403):
            raise EngineError(f"the server at {url} refused the API key: {_error_message(response.content)}")
        if response.status_code == 404:
            return  # some servers have no /models; the first request will tell
        if response.status_code >= 400:
            raise EngineError(
                f"{response.status_code} from {url}: {_error_message(response.content)}",
                transient=response.status_code in TRANSIENT_STATUS,
            )
        try:
            served = [m.get("id") for m in response.json().get("data", [])]
        except (ValueError, AttributeError):
            return
        assert self.config is not None
        if served and self.config.target_model not in served:
            raise EngineError(
                f"the server at {self.base_url} serves {served}, not {self.config.target_model!r}; "
                "set target_model to the name the server uses"
            )
        try:
            version = httpx.get(self.base_url.removesuffix("/v1") + "/version", timeout=self._timeout())
            if version.status_code == 200:
                self._server_version = str(version.json().get("version"))
        except (httpx.HTTPError, ValueError, AttributeError):
            pass

    def _client_here(self) -> httpx.AsyncClient:
        # An AsyncClient belongs to the event loop that opened its connections; each replay
        # runs its own loop, so the client is made per loop.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            limit = self._args().get("max_connections")
            self._client = httpx.AsyncClient(
                timeout=self._timeout(),
                limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit or 4096),
                headers=self._headers(),
            )
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close this loop's connections (the replay calls it before its loop ends)."""
        client, self._client, self._client_loop = self._client, None, None
        pool, self._pool, self._pool_loop = self._pool, None, None
        if client is not None:
            await client.aclose()
        if pool is not None:
            pool.close()

    def stop(self) -> None:
        if self._pool is not None and self._pool_loop is not None and not self._pool_loop.is_closed():
            self._pool.close()
        self._pool, self._pool_loop = None, None
        client, loop = self._client, self._client_loop
        self._client, self._client_loop = None, None
        if client is None or loop is None or loop.is_closed():
            return
        if loop.is_running():
            loop.create_task(client.aclose())
        else:
            loop.run_until_complete(client.aclose())

    # -- requests -----------------------------------------------------------------------------

    def request_body(self, *, request: EngineRequest) -> tuple[str, dict[str, Any]]:
        """The URL and JSON body for one request (public so tests can see what is sent)."""
        args = self._args()
        assert self.config is not None
        endpoint = args.get("endpoint") or ("chat" if request.messages else "completions")
        body: dict[str, Any] = {
            "model": self.config.target_model,
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
            url = f"{self.base_url}/chat/completions"
        else:
            if request.messages:
                raise EngineError(
                    f"request {request.request_id} has chat messages but engine_args.endpoint is "
                    "'completions'; use endpoint 'chat'"
                )
            body["prompt"] = request.prompt or ""
            url = f"{self.base_url}/completions"
        body.update(args.get("extra_body") or {})
        return url, body

    async def stream(self, request: EngineRequest) -> AsyncIterator[Chunk]:
        """Yield one chunk per SSE event with output; a last empty chunk carries the finish reason
        when the server sends it separately. Raises EngineError (transient for connection
        trouble and 408/429/5xx)."""
        url, body = self.request_body(request=request)
        if self._args().get("transport", "native") == "httpx":
            lines = self._lines_httpx(url=url, body=body, request_id=request.request_id)
        else:
            lines = self._lines_native(url=url, body=body, request_id=request.request_id)
        try:
            async for chunk in self._events(lines=lines, url=url):
                yield chunk
        finally:
            # Close the line reader now, not at garbage collection: its connection goes back
            # to the pool (or is closed) in its finally block.
            await lines.aclose()  # type: ignore[attr-defined]

    async def _lines_httpx(
        self, *, url: str, body: dict[str, Any], request_id: str
    ) -> AsyncIterator[tuple[str, float]]:
        client = self._client_here()
        try:
            async with client.stream("POST", url, json=body, headers={"X-Request-Id": request_id}) as r:
                if r.status_code >= 400:
                    raw = await r.aread()
                    raise EngineError(
                        f"{r.status_code} from {url}: {_error_message(raw)}",
                        transient=r.status_code in TRANSIENT_STATUS,
                    )
                async for line in r.aiter_lines():
                    yield line, time.perf_counter()
        except httpx.ConnectError as exc:
            raise EngineError(
                f"cannot connect to {url}: {exc or 'connection refused'}", transient=True
            ) from exc
        except httpx.TimeoutException as exc:
            raise EngineError(f"timed out waiting for {url} ({type(exc).__name__})", transient=True) from exc
        except httpx.TransportError as exc:
            raise EngineError(
                f"the connection to {url} broke mid-stream ({type(exc).__name__}: {exc})", transient=True
            ) from exc

    async def _lines_native(
        self, *, url: str, body: dict[str, Any], request_id: str
    ) -> AsyncIterator[tuple[str, float]]:
        pool = self._pool_here()
        payload = json.dumps(body).encode()
        head = pool.request_head(path=urlsplit(url).path, length=len(payload), request_id=request_id)
        async for line in pool.post_lines(data=head + payload, url=url):
            yield line

    def _pool_here(self) -> _Pool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            args = self._args()
            self._pool = _Pool(
                base_url=self.base_url,
                headers=self._headers(),
                read_timeout_s=float(args.get("timeout_s", 600)),
                connect_timeout_s=float(args.get("connect_timeout_s", 10)),
                max_connections=args.get("max_connections"),
            )
            self._pool_loop = loop
        return self._pool

    async def _events(self, *, lines: AsyncIterator[tuple[str, float]], url: str) -> AsyncIterator[Chunk]:
        data_lines: list[str] = []
        tokens_so_far = 0  # completion tokens per continuous usage stats
        pending_prompt: int | None = None  # the server's usage.prompt_tokens, told once
        prompt_told = False
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
                raise EngineError(
                    f"the server failed the request mid-stream: {_error_message(data.encode())}"
                )
            usage = event.get("usage") or {}
            if not prompt_told and pending_prompt is None and isinstance(usage.get("prompt_tokens"), int):
                # The server's own count of the templated prompt (stream_options.include_usage):
                # told with the next chunk, or on an empty one from the final usage-only event.
                pending_prompt = int(usage["prompt_tokens"])
            choices = event.get("choices") or []
            metrics = event.get("metrics")
            spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
            if spec is not None:
                # vLLM's per-request spec-decode metrics: on the stream's last event only.
                steps, totals = spec_request_metrics(metrics=spec, where=f"the last SSE event from {url}")
                for drafted, accepted in steps or []:
                    yield OpenAIChunk(token_ids=[], text="", t=t, drafted=drafted, accepted=accepted, num_tokens=0)
                if steps is None:
                    yield OpenAIChunk(token_ids=[], text="", t=t, num_tokens=0, spec_totals=totals)
            if not choices:
                if pending_prompt is not None:
                    yield OpenAIChunk(token_ids=[], text="", t=t, num_tokens=0, prompt_tokens=pending_prompt)
                    pending_prompt, prompt_told = None, True
                continue
            choice = choices[0]
            if not isinstance(choice, dict):
                raise EngineError(f"malformed SSE event from {url}: {data[:200]!r}")
            text = _choice_text(choice)
            token_ids = choice.get("token_ids")
            if isinstance(token_ids, list):
                num_tokens: int | None = len(token_ids)
            elif "completion_tokens" in usage:
                num_tokens = int(usage["completion_tokens"]) - tokens_so_far
                token_ids = []
            else:
                num_tokens, token_ids = None, []
            if "completion_tokens" in usage:
                tokens_so_far = int(usage["completion_tokens"])
            finish = choice.get("finish_reason")
            if not text and not num_tokens and finish is None:
                continue  # vLLM's first chat event carries only the role
            yield OpenAIChunk(
                token_ids=[int(i) for i in token_ids],
                text=text,
                t=t,
                finish_reason=finish,
                num_tokens=num_tokens if (text or num_tokens) else 0,
                prompt_tokens=pending_prompt,
            )
            if pending_prompt is not None:
                pending_prompt, prompt_told = None, True
        if not done:
            raise EngineError(f"the stream from {url} ended without [DONE]", transient=True)

    # -- counters -----------------------------------------------------------------------------

    def counters(self) -> dict[str, Any]:
        """Spec-decode counters scraped from the server's /metrics now (tokens, steps).

        A server without a metrics page, or one that does not answer, yields
        ``{"metrics_error": ...}`` instead of failing the run.
        """
        url = self.metrics_url
        if not url:
            return {}
        try:
            response = httpx.get(url, headers=self._headers(), timeout=10)
        except httpx.HTTPError as exc:
            return {"metrics_error": f"{url}: {type(exc).__name__}: {exc}"}
        if response.status_code != 200:
            return {"metrics_error": f"{url}: HTTP {response.status_code}"}
        return prometheus_spec_counters(text=response.text)

    def kv_state(self) -> dict[str, Any]:
        """The server's KV-cache state now, from its /metrics (see :func:`prometheus_kv_state`);
        ``{}`` where there is no metrics page or it does not answer (the sampler skips it)."""
        url = self.metrics_url
        if not url:
            return {}
        try:
            response = httpx.get(url, headers=self._headers(), timeout=5)
        except httpx.HTTPError:
            return {}
        return prometheus_kv_state(text=response.text) if response.status_code == 200 else {}

    def memory(self) -> dict[str, Any]:
        """What the server's /metrics says of its memory (bytes); the client's is not the server's."""
        counters = self.counters()
        return {k: counters[k] for k in ("server_rss_bytes", "kv_cache_usage_perc") if k in counters}

    def versions(self) -> dict[str, str]:
        out = {"engine": "openai", "httpx": httpx.__version__}
        if self._server:
            out["server_url"] = self._server["url"]  # registered, so it carries no credentials
        if self._server_version:
            out["server"] = self._server_version
        return out


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()


class _Pool:
    """A lean HTTP/1.1 client for streamed POSTs: keep-alive connections to one server.

    httpx's pool costs O(open connections) per request and looked up an uninstalled
    module on every request; at 400 requests/s on 2 cores the client fell seconds behind
    schedule. This one costs a few tens of microseconds per request, which is what an
    open-loop load generator needs. Plain HTTP/1.1 and TLS only: no proxies, no HTTP/2,
    no redirects (``transport: httpx`` has them).
    """

    def __init__(
        self,
        *,
        base_url: str,
        headers: dict[str, str],
        read_timeout_s: float,
        connect_timeout_s: float,
        max_connections: int | None,
    ):
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.port = parts.port or (443 if self.ssl else 80)
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._slots = asyncio.Semaphore(int(max_connections)) if max_connections else None
        self._idle: list[_Connection] = []
        host_header = parts.netloc.rsplit("@", 1)[-1]
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._head_prefix = f"Host: {host_header}\r\nUser-Agent: specreview\r\nAccept: text/event-stream\r\n"
        self._head_prefix += "Content-Type: application/json\r\n" + extra

    def request_head(self, *, path: str, length: int, request_id: str) -> bytes:
        return (
            f"POST {path} HTTP/1.1\r\n{self._head_prefix}X-Request-Id: {request_id}\r\n"
            f"Content-Length: {length}\r\n\r\n"
        ).encode("latin-1")

    async def _connect(self, url: str) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.ssl, limit=1 << 20
                )
        except TimeoutError as exc:
            raise EngineError(f"timed out connecting to {url}", transient=True) from exc
        except OSError as exc:
            raise EngineError(f"cannot connect to {url}: {exc.strerror or exc}", transient=True) from exc
        return _Connection(reader, writer)

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.writer.close()

    async def post_lines(self, *, data: bytes, url: str) -> AsyncIterator[tuple[str, float]]:
        """Send one request and yield the response body's lines with the perf_counter time
        (seconds) at which the bytes that completed each line were read."""
        if self._slots is not None:
            await self._slots.acquire()
        watchdog = _Watchdog(timeout_s=self.read_timeout_s)
        conn: _Connection | None = None
        reusable = False
        try:
            conn, status, headers = await self._send(data=data, url=url, watchdog=watchdog)
            if status >= 400:
                raw = b"".join([piece async for piece, _ in self._body(conn, headers, watchdog)])
                reusable = _keep_alive(headers)
                raise EngineError(
                    f"{status} from {url}: {_error_message(raw)}", transient=status in TRANSIENT_STATUS
                )
            buffer = b""
            async for piece, t in self._body(conn, headers, watchdog):
                buffer += piece
                while (cut := buffer.find(b"\n")) >= 0:
                    line, buffer = buffer[:cut], buffer[cut + 1 :]
                    yield line.rstrip(b"\r").decode("utf-8", "replace"), t
            if buffer:
                yield buffer.decode("utf-8", "replace"), time.perf_counter()
            reusable = _keep_alive(headers)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError) as exc:
            if watchdog.fired:
                raise EngineError(f"no data from {url} for {self.read_timeout_s} s", transient=True) from exc
            raise EngineError(
                f"the connection to {url} broke mid-stream ({type(exc).__name__}: {exc})", transient=True
            ) from exc
        except ValueError as exc:
            raise EngineError(f"malformed HTTP response from {url}: {exc}") from exc
        finally:
            watchdog.cancel()
            if conn is not None:
                if reusable and conn.usable():
                    self._idle.append(conn)
                else:
                    conn.writer.close()
            if self._slots is not None:
                self._slots.release()

    async def _send(
        self, *, data: bytes, url: str, watchdog: _Watchdog
    ) -> tuple[_Connection, int, dict[str, str]]:
        """Write the request and read the response head. A kept-alive connection that the
        server closed meanwhile fails before any response byte: then retry once on a new one."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.usable():
                conn.writer.close()
                continue
            try:
                watchdog.attach(conn.writer.transport)
                conn.writer.write(data)
                return (conn, *await self._head(conn, watchdog))
            except (asyncio.IncompleteReadError, ConnectionError):
                conn.writer.close()
                if watchdog.fired:
                    raise
        conn = await self._connect(url)
        try:
            watchdog.attach(conn.writer.transport)
            conn.writer.write(data)
            return (conn, *await self._head(conn, watchdog))
        except BaseException:
            conn.writer.close()
            raise

    @staticmethod
    async def _head(conn: _Connection, watchdog: _Watchdog) -> tuple[int, dict[str, str]]:
        raw = await conn.reader.readuntil(b"\r\n\r\n")
        watchdog.touch()
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ValueError(f"bad status line {lines[0][:100]!r}")
        headers = {}
        for line in lines[1:]:
            if line:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
        headers[":version"] = parts[0]
        return int(parts[1]), headers

    @staticmethod
    async def _body(
        conn: _Connection, headers: dict[str, str], watchdog: _Watchdog
    ) -> AsyncIterator[tuple[bytes, float]]:
        reader = conn.reader
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await reader.readline()
                if not size_line:
                    raise asyncio.IncompleteReadError(b"", None)
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                piece = await reader.readexactly(size + 2)
                watchdog.touch()
                yield piece[:-2], time.perf_counter()
        elif "content-length" in headers:
            remaining = int(headers["content-length"])
            while remaining > 0:
                piece = await reader.read(min(remaining, 1 << 16))
                if not piece:
                    raise asyncio.IncompleteReadError(b"", remaining)
                watchdog.touch()
                remaining -= len(piece)
                yield piece, time.perf_counter()
        else:
            headers["connection"] = "close"  # the body ends when the server closes
            while piece := await reader.read(1 << 16):
                watchdog.touch()
                yield piece, time.perf_counter()


class _Watchdog:
    """Aborts the connection of a request that has heard nothing for ``timeout_s`` seconds.

    One timer per request, re-armed lazily, instead of a timeout context around every read:
    those cost a quarter of the client's time per request at high rates.
    """

    __slots__ = ("_loop", "_timeout_s", "_last", "_handle", "_transport", "fired")

    def __init__(self, *, timeout_s: float):
        self._loop = asyncio.get_running_loop()
        self._timeout_s = timeout_s
        self._last = self._loop.time()
        self._transport: asyncio.BaseTransport | None = None
        self.fired = False
        self._handle = self._loop.call_at(self._last + timeout_s, self._check)

    def attach(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._last = self._loop.time()

    def touch(self) -> None:
        self._last = self._loop.time()

    def _check(self) -> None:
        due = self._last + self._timeout_s
        if self._loop.time() < due or self._transport is None:
            self._handle = self._loop.call_at(max(due, self._loop.time() + 0.1), self._check)
            return
        self.fired = True
        self._transport.abort()  # type: ignore[attr-defined]

    def cancel(self) -> None:
        self._handle.cancel()


def _keep_alive(headers: dict[str, str]) -> bool:
    connection = headers.get("connection", "").lower()
    if headers.get(":version") == "HTTP/1.0":
        return connection == "keep-alive"
    return connection != "close"


def _choice_text(choice: dict[str, Any]) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    parts = [delta.get("content") or ""]
    for call in delta.get("tool_calls") or []:
        parts.append(((call or {}).get("function") or {}).get("arguments") or "")
    return "".join(parts)


def openai_config_validate(*, config: EngineConfig) -> dict[str, str]:
    """Refuse a config the openai engine cannot use, before any run starts; return the
    registered server it names (``{"url", "credential"}``).

    Only servers the operator registered are reachable, and their key comes with the
    registration. The speculative config is informational (the server runs what it was
    started with): it must be an object of vLLM keys, and is recorded as given.
    """
    args = config.engine_args
    if not isinstance(args, dict):
        raise EngineError("engine_args must be an object")
    for key, why in REFUSED_ARGS.items():
        if key in args:
            raise EngineError(
                f"engine_args.{key} is not accepted: {why}. Name a registered server with "
                '"server" and its key comes with it (an operator registers servers and credentials '
                "in SPECREVIEW_OPENAI_SERVERS / SPECREVIEW_OPENAI_CREDENTIALS, see docs/engines.md)"
            )
    unknown = set(args) - ENGINE_ARGS
    if unknown:
        raise EngineError(
            f"engine_args {sorted(unknown)} are not understood by the openai engine; known: "
            f"{sorted(ENGINE_ARGS)}"
        )
    if "server" not in args:
        base_url = args.get("base_url")
        if not isinstance(base_url, str) or not re.match(r"^https?://", base_url):
            raise EngineError(
                'engine_args needs "server" (a registered server\'s name) or "base_url" (its '
                "http(s) URL, e.g. http://127.0.0.1:8000/v1)"
            )
    name, server = openai_server_for(server=args.get("server"), base_url=args.get("base_url"))
    credential = args.get("credential")
    if credential is not None and credential != server["credential"]:
        given = server["credential"] or "none"
        raise EngineError(
            f"engine_args.credential {credential!r} is not the credential of server {name!r} ({given}): "
            "a server's key comes with its registration; leave credential out"
        )
    metrics_url = args.get("metrics_url")
    if metrics_url not in (None, "") and _origin(str(metrics_url)) != _origin(server["url"]):
        raise EngineError(
            f"engine_args.metrics_url must be on the server's own scheme, host and port "
            f'({_origin(server["url"])}), or "" to skip scraping'
        )
    if args.get("endpoint") not in (None, "chat", "completions"):
        raise EngineError(f"engine_args.endpoint must be 'chat' or 'completions', got {args['endpoint']!r}")
    if not config.target_model:
        raise EngineError("target_model must be the model name the server serves")
    if args.get("extra_body") is not None and not isinstance(args["extra_body"], dict):
        raise EngineError("engine_args.extra_body must be an object")
    spec = config.speculative_config
    if spec is None:
        return server
    if not isinstance(spec, dict):
        raise EngineError(f"speculative_config must be an object, got {type(spec).__name__}")
    if not all(isinstance(k, str) for k in spec):
        raise EngineError("speculative_config keys must be strings (vLLM's own keys)")
    if "method" in spec and not isinstance(spec["method"], str):
        raise EngineError(f"speculative_config.method must be a string, got {spec['method']!r}")
    k = spec.get("num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise EngineError(f"speculative_config.num_speculative_tokens must be an integer >= 1, got {k!r}")
    return server


def _origin(url: str) -> str:
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "(not a URL)"
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"
