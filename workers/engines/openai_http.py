"""The ``openai`` engine: any OpenAI-compatible server (vLLM serve, SGLang, TensorRT-LLM).

Requests stream over HTTP/1.1 Server-Sent Events with httpx; every SSE event that carries
output becomes one :class:`Chunk`, timestamped with ``time.perf_counter()`` when its line
arrived. Spec-decode counters come from the server's Prometheus ``/metrics`` (vLLM's
``vllm:spec_decode_*`` counters), scraped by ``counters()`` before and after a run so the
run records deltas.

What the server does not send, the engine cannot know:

- what is sent depends on the server's kind: plain OpenAI to every server; vLLM's
  extensions (``return_token_ids``, ``stream_options.continuous_usage_stats``) only to a
  server known to be vLLM: registered with ``"kind": "vllm"``, or detected at start from its
  ``/version`` (``{"version": ...}``) or a ``vllm:`` sample on its ``/metrics``. A server
  registered with ``"kind": "openai"`` is never probed. ``engine_args.return_token_ids`` /
  ``continuous_usage_stats`` override the kind either way. ``versions()`` records the kind
  (``server_kind``) and where it came from (``server_kind_source``).
- token ids per chunk need vLLM's ``return_token_ids``. Without ids, the token count per chunk
  comes from vLLM's ``continuous_usage_stats``; without either, each event with text counts as
  one token and the final ``usage`` total corrects the sum (``versions()["chunk_tokens"]`` says
  the counts are estimates).
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
``check_server`` (default true: ``start()`` lists the server's models and detects its kind; a
``/v1/models`` that answers 404, 5xx or something unparsable is noted in ``versions()`` as
``models_check``, not fatal: only a refused key and a model the server does not serve are).

This module is the engine's lifecycle and transport choice; its parts each have a module:
``openai_config`` (which configs are accepted), ``openai_stream`` (request bodies, SSE parsing,
error bodies), ``openai_pool`` (the HTTP/1.1 client) and ``openai_metrics`` (``/metrics`` and
per-request spec-decode metrics, read as plain data).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx

from .base import Chunk, EngineConfig, EngineError, EngineRequest
from .openai_config import openai_config_validate
from .openai_metrics import MetricsWindow
from .openai_pool import Pool
from .openai_stream import TRANSIENT_STATUS, StreamStats, error_message, request_body_build, sse_chunks
from .servers import credential_value

log = logging.getLogger(__name__)

# Any sample of vLLM's own metric families on a Prometheus page.
_VLLM_SAMPLE = re.compile(r"^vllm:\w+", re.MULTILINE)


class OpenAIEngine:
    kind = "openai"
    _metrics_window: MetricsWindow | None = None

    def __init__(self) -> None:
        self.config: EngineConfig | None = None
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._server_version: str | None = None
        self._pool: Pool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._server: dict[str, str] = {}
        self._server_kind = "unknown"  # vllm | openai | unknown (plain OpenAI is sent)
        self._server_kind_source = "not checked"
        self._models_check: str | None = None
        self._stream_stats = StreamStats()

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
        self._stream_stats = StreamStats()
        self._models_check = None
        registered = self._server.get("kind")
        self._server_kind = registered or "unknown"
        self._server_kind_source = "registration" if registered else "not checked"
        if config.engine_args.get("check_server", True):
            self._check_server()
            if not registered:
                self._server_kind, self._server_kind_source = self._kind_detect()

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
        """List the server's models: a refused key or another model is permanent, no answer is
        transient; any other failure of ``/v1/models`` (404, 5xx, not JSON) is noted and passed
        over, since some servers fail it while serving completions (``transformers serve``
        answers 500 when no hub cache folder exists)."""
        url = f"{self.base_url}/models"
        try:
            response = httpx.get(url, headers=self._headers(), timeout=self._timeout())
        except httpx.TransportError as exc:
            raise EngineError(f"cannot reach the server at {url}: {exc}", transient=True) from exc
        if response.status_code in (401, 403):
            raise EngineError(f"the server at {url} refused the API key: {error_message(response.content)}")
        if response.status_code >= 400:
            self._models_check = f"HTTP {response.status_code}: {error_message(response.content)[:200]}"
            log.warning("%s answered %s; the first request will tell", url, self._models_check)
            return
        try:
            served = [m.get("id") for m in response.json().get("data", [])]
        except (ValueError, AttributeError, TypeError):
            self._models_check = "not a model list"
            return
        assert self.config is not None
        if served and self.config.target_model not in served:
            raise EngineError(
                f"the server at {self.base_url} serves {served}, not {self.config.target_model!r}; "
                "set target_model to the name the server uses"
            )

    def _kind_detect(self) -> tuple[str, str]:
        """(kind, where it came from): ``vllm`` when ``/version`` answers ``{"version": ...}`` or
        the metrics page has a ``vllm:`` sample; else ``unknown``. Never fails the start."""
        root = self.base_url.removesuffix("/v1")
        try:
            version = httpx.get(root + "/version", headers=self._headers(), timeout=self._timeout())
            body = version.json() if version.status_code == 200 else None
            if isinstance(body, dict) and body.get("version"):
                self._server_version = str(body["version"])
                return "vllm", "/version"
        except (httpx.HTTPError, ValueError):
            pass
        url = self.metrics_url
        if url:
            try:
                page = httpx.get(url, headers=self._headers(), timeout=self._timeout())
                if page.status_code == 200 and _VLLM_SAMPLE.search(page.text):
                    return "vllm", "/metrics"
            except httpx.HTTPError:
                pass
        return "unknown", "detected: not vLLM"

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
        self._args()
        assert self.config is not None
        return request_body_build(
            config=self.config, base_url=self.base_url, request=request, server_kind=self._server_kind
        )

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
            async for chunk in sse_chunks(lines=lines, url=url, stats=self._stream_stats):
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
                        f"{r.status_code} from {url}: {error_message(raw)}",
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

    def _pool_here(self) -> Pool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            args = self._args()
            self._pool = Pool(
                base_url=self.base_url,
                headers=self._headers(),
                read_timeout_s=float(args.get("timeout_s", 600)),
                connect_timeout_s=float(args.get("connect_timeout_s", 10)),
                max_connections=args.get("max_connections"),
            )
            self._pool_loop = loop
        return self._pool

    # -- counters -----------------------------------------------------------------------------

    def _scrape(self, *, timeout_s: float) -> tuple[str | None, str | None]:
        """The metrics page's body, or None and why not (no page configured: both None)."""
        url = self.metrics_url
        if not url:
            return None, None
        try:
            response = httpx.get(url, headers=self._headers(), timeout=timeout_s)
        except httpx.HTTPError as exc:
            return None, f"{url}: {type(exc).__name__}: {exc}"
        if response.status_code != 200:
            return None, f"{url}: HTTP {response.status_code}"
        return response.text, None

    @property
    def _metrics(self) -> MetricsWindow:
        # Made on first use (``counters()`` before a run, ahead of the sampler's thread).
        if self._metrics_window is None:
            self._metrics_window = MetricsWindow()
        return self._metrics_window

    def counters(self) -> dict[str, Any]:
        """Spec-decode figures from the server's /metrics now (tokens, steps): vLLM's counters,
        TensorRT-LLM's summed iteration statistics, or SGLang's gauges sampled since the last
        call (``spec_sampled``); see :class:`.openai_metrics.MetricsWindow`.

        A server without a metrics page, or one that does not answer, yields
        ``{"metrics_error": ...}`` instead of failing the run.
        """
        text, error = self._scrape(timeout_s=10)
        if text is None:
            return {"metrics_error": error} if error else {}
        return self._metrics.counters(text=text)

    def kv_state(self) -> dict[str, Any]:
        """The server's KV-cache state now, from its /metrics (see
        :func:`.openai_metrics.prometheus_kv_state`); ``{}`` where there is no metrics page or it
        does not answer (the sampler skips it). Each read also feeds the run's sampled spec
        gauges (SGLang) or iteration sums (TensorRT-LLM)."""
        text, _ = self._scrape(timeout_s=5)
        return self._metrics.kv_state(text=text) if text is not None else {}

    def memory(self) -> dict[str, Any]:
        """What the server's /metrics says of its memory (bytes); the client's is not the server's."""
        text, _ = self._scrape(timeout_s=10)
        return self._metrics.memory(text=text) if text is not None else {}

    def versions(self) -> dict[str, str]:
        out = {"engine": "openai", "httpx": httpx.__version__}
        if self._server:
            out["server_url"] = self._server["url"]  # registered, so it carries no credentials
        if self._server_version:
            out["server"] = self._server_version
        if self._server:
            out["server_kind"] = self._server_kind
            out["server_kind_source"] = self._server_kind_source
        if self._models_check:
            out["models_check"] = self._models_check
        stats = self._stream_stats
        if stats.ended_without_done:
            # Accepted as complete (they ended after finish_reason), and recorded: a server
            # that also drops streams mid-way would show up as failed requests, not here.
            out["stream_end"] = (
                f"{stats.ended_without_done} of {stats.streams} streams ended after finish_reason "
                "without [DONE]"
            )
        if stats.estimated_counts:
            out["chunk_tokens"] = (
                f"estimated in {stats.estimated_counts} of {stats.streams} streams: one token per "
                "event, the final usage's total corrects the sum (the server sent no token ids or "
                "running counts)"
            )
        return out
