"""Which configs the ``hf`` engine accepts, checked without loading a model.

The speculative methods it runs (vLLM's keys: ``ngram`` and ``draft_model``) become a
:class:`SpecPlan` in transformers' terms, with vLLM's defaults where a key is left out, so one
config means the same on both engines; ``engine_args`` are ``dtype``, ``num_threads`` and
``device``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import EngineError, validate_speculative_config

SUPPORTED_METHODS: dict[str, set[str]] = {
    "ngram": {"num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"},
    "draft_model": {"model", "num_speculative_tokens", "draft_length_schedule", "draft_confidence_threshold"},
}
ENGINE_ARGS = {"dtype", "num_threads", "device"}
DTYPES = {
    "auto": "auto",
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}
SCHEDULES = {"constant", "heuristic", "dynamic"}
# vLLM's ngram defaults, so one config means the same thing on both engines.
VLLM_PROMPT_LOOKUP_DEFAULT = 5
DEFAULT_CONFIDENCE = 0.4


@dataclass(frozen=True)
class SpecPlan:
    """A validated speculative config, in transformers' terms."""

    method: str
    k: int
    lookup_min: int | None = None
    lookup_max: int | None = None
    draft: str | None = None
    schedule: str = "constant"
    confidence: float | None = None


def spec_plan(spec: dict[str, Any] | None) -> SpecPlan | None:
    """The speculative config in transformers' terms, vLLM's defaults filled in; None for the
    baseline. Raises EngineError naming the key that is wrong."""
    validate_speculative_config(spec, supported=SUPPORTED_METHODS, engine="hf")
    if spec is None:
        return None
    method = spec["method"]
    k = spec.get("num_speculative_tokens")
    if k is None:
        raise EngineError(f"speculative_config.num_speculative_tokens is required for method {method!r}")
    if method == "ngram":
        lo, hi = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
        for key, value in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise EngineError(f"speculative_config.{key} must be an integer >= 1, got {value!r}")
        if lo is None and hi is None:
            lo = hi = VLLM_PROMPT_LOOKUP_DEFAULT
        elif lo is None:
            lo = hi
        elif hi is None:
            hi = lo
        assert lo is not None and hi is not None
        if lo > hi:
            raise EngineError(f"speculative_config.prompt_lookup_min ({lo}) exceeds prompt_lookup_max ({hi})")
        return SpecPlan(method=method, k=k, lookup_min=lo, lookup_max=hi)
    draft = spec.get("model")
    if not isinstance(draft, str) or not draft:
        raise EngineError("speculative_config.model (the draft model) is required for method 'draft_model'")
    schedule = spec.get("draft_length_schedule", "constant")
    if schedule not in SCHEDULES:
        raise EngineError(
            f"speculative_config.draft_length_schedule must be one of {sorted(SCHEDULES)}, got {schedule!r}"
        )
    confidence = spec.get("draft_confidence_threshold")
    if confidence is not None:
        if schedule != "dynamic":
            raise EngineError(
                "speculative_config.draft_confidence_threshold needs draft_length_schedule 'dynamic'"
            )
        if not isinstance(confidence, int | float) or isinstance(confidence, bool) or not 0 < confidence < 1:
            raise EngineError(
                f"speculative_config.draft_confidence_threshold must be in (0, 1), got {confidence!r}"
            )
    if schedule == "dynamic" and confidence is None:
        confidence = DEFAULT_CONFIDENCE
    return SpecPlan(method=method, k=k, draft=draft, schedule=schedule, confidence=confidence)


def engine_args_check(args: dict[str, Any]) -> None:
    """Refuse engine_args the hf engine does not understand or cannot run (float16 off CUDA)."""
    unknown = set(args) - ENGINE_ARGS
    if unknown:
        raise EngineError(
            f"engine_args {sorted(unknown)} are not understood by the hf engine; known: {sorted(ENGINE_ARGS)}"
        )
    if "dtype" in args and args["dtype"] not in DTYPES:
        raise EngineError(f"engine_args.dtype must be one of {sorted(DTYPES)}, got {args['dtype']!r}")
    if DTYPES.get(args.get("dtype", "auto")) == "float16" and args.get("device", "cpu") != "cuda":
        raise EngineError("engine_args.dtype 'float16' needs device 'cuda' (CPUs have no fast float16 path)")
    threads = args.get("num_threads")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise EngineError(f"engine_args.num_threads must be an integer >= 1, got {threads!r}")
    if args.get("device", "cpu") not in {"cpu", "cuda"}:
        raise EngineError(f"engine_args.device must be 'cpu' or 'cuda', got {args['device']!r}")
