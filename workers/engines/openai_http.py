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

This module is the engine's lifecycle and transport choice; its parts each have a module:
``openai_config`` (which configs are accepted), ``openai_stream`` (request bodies, SSE parsing,
error bodies), ``openai_pool`` (the HTTP/1.1 client) and ``openai_metrics`` (``/metrics`` and
per-request spec-decode metrics, read as plain data).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx

from .base import Chunk, EngineConfig, EngineError, EngineRequest
from .openai_config import openai_config_validate
from .openai_metrics import MetricsWindow
from .openai_pool import Pool
from .openai_stream import TRANSIENT_STATUS, error_message, request_body_build, sse_chunks
from .servers import credential_value


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
            raise EngineError(f"the server at {url} refused the API key: {error_message(response.content)}")
        if response.status_code == 404:
            return  # some servers have no /models; the first request will tell
        if response.status_code >= 400:
            raise EngineError(
                f"{response.status_code} from {url}: {error_message(response.content)}",
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
        self._args()
        assert self.config is not None
        return request_body_build(config=self.config, base_url=self.base_url, request=request)

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
            async for chunk in sse_chunks(lines=lines, url=url):
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
        return out
