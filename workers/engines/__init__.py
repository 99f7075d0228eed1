"""Engine registry keyed by kind, imported lazily so a CPU host never imports vLLM."""

from __future__ import annotations

import importlib

from .base import Chunk, Engine, EngineConfig, EngineError, EngineRequest

_REGISTRY = {
    "hf": "workers.engines.hf:HFEngine",
    "vllm": "workers.engines.vllm:VLLMEngine",
    "openai": "workers.engines.openai_http:OpenAIEngine",
}

ENGINE_KINDS = tuple(_REGISTRY)


def engine_class(kind: str) -> type:
    try:
        target = _REGISTRY[kind]
    except KeyError:
        raise EngineError(f"unknown engine kind {kind!r}; known: {', '.join(_REGISTRY)}") from None
    module_name, _, attr = target.partition(":")
    try:
        # seam: the registry imports an engine's module only when its kind is asked for (no vLLM on a CPU host)
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineError(f"engine {kind!r} is not installed here ({exc}); see docs/engines.md") from exc
    return getattr(module, attr)


def engine_create(kind: str) -> Engine:
    return engine_class(kind)()


def engine_config_validate(config: EngineConfig) -> EngineConfig:
    """The one check every config passes, at creation (form, CLI, API) and again on the worker.

    Asks the engine's own ``validate`` (nothing is loaded or contacted). Returns the config to
    store; raises EngineError with a message that names the field (``engine_args.KEY``).
    """
    cls = engine_class(config.engine)
    validate = getattr(cls, "validate", None)
    if validate is not None:
        validate(config)
    return config


__all__ = [
    "Chunk",
    "Engine",
    "EngineConfig",
    "EngineError",
    "EngineRequest",
    "ENGINE_KINDS",
    "engine_class",
    "engine_config_validate",
    "engine_create",
]
