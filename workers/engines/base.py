"""The one protocol every engine speaks, and the one error type it raises.

Times are seconds from ``time.perf_counter()`` (monotonic, same clock as the replay
scheduler). Token counts are target-model tokens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class EngineError(Exception):
    """Anything an engine cannot do, said so a user can act on it.

    ``transient`` marks errors worth a retry (a server that is still starting, a
    dropped connection); everything else fails the run with this message.
    """

    def __init__(self, message: str, *, transient: bool = False):
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class EngineConfig:
    """What an engine is started with: a ServingConfig, minus the database.

    ``speculative_config`` uses vLLM's own keys (``method``, ``model``,
    ``num_speculative_tokens``, ``prompt_lookup_min``, ``prompt_lookup_max``, ...)
    or is ``None`` for the baseline.
    """

    engine: str  # "hf" | "vllm" | "openai"
    target_model: str  # catalog name, local HF folder, GGUF path, or the server's model name
    engine_args: dict[str, Any] = field(default_factory=dict)
    speculative_config: dict[str, Any] | None = None


@dataclass(frozen=True)
class EngineRequest:
    """One request of a trace, as the engine needs it."""

    request_id: str
    max_tokens: int
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    seed: int | None = None
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None


@dataclass
class Chunk:
    """What the user sees arrive at once: one or more tokens.

    ``t`` is ``time.perf_counter()`` when the chunk became visible. ``drafted`` and
    ``accepted`` are per verification step (one step may yield one chunk); ``None``
    where the engine cannot tell (baseline, or an engine without per-step counts).
    ``finish_reason`` is set on the last chunk ("stop", "length", ...).
    ``prompt_tokens`` is the engine's own count of the prompt it sent (hf: the templated input
    ids; vllm: the request's prompt_token_ids; openai: the server's ``usage.prompt_tokens``).
    """

    token_ids: list[int]
    text: str
    t: float
    drafted: int | None = None
    accepted: int | None = None
    finish_reason: str | None = None
    # Tokens of the prompt the model was given (after the chat template, with tools and system
    # prompt), where the engine knows it; set on one chunk of a request, ``None`` on the others.
    prompt_tokens: int | None = None


@runtime_checkable
class Engine(Protocol):
    kind: str

    def start(self, config: EngineConfig) -> None:
        """Load models / connect. Raises EngineError on a bad config or missing model."""

    def stream(self, request: EngineRequest) -> AsyncIterator[Chunk]:
        """Yield chunks as they become visible. Must be safe to call concurrently from one event
        loop; an engine that serves one request at a time queues the others internally."""
        ...

    def counters(self) -> dict[str, Any]:
        """Engine-wide counters (e.g. spec-decode totals) at this moment."""
        ...

    def memory(self) -> dict[str, Any]:
        """Memory the engine holds now, in bytes (keys: "rss_bytes", "gpu_bytes", ...)."""
        ...

    def versions(self) -> dict[str, str]:
        """Engine and library versions for the run record."""
        ...

    def stop(self) -> None:
        """Release everything. Safe to call twice."""


def validate_speculative_config(
    spec: dict[str, Any] | None, *, supported: dict[str, set[str]], engine: str
) -> None:
    """Refuse a speculative config an engine cannot run, before any run starts.

    ``supported`` maps each method the engine runs to the keys it accepts for it.
    """
    if spec is None:
        return
    if not isinstance(spec, dict):
        raise EngineError(f"speculative_config must be an object, got {type(spec).__name__}")
    method = spec.get("method")
    if method not in supported:
        raise EngineError(
            f"speculative_config.method {method!r} is not supported by the {engine!r} engine; "
            f"supported: {', '.join(sorted(supported))}"
        )
    unknown = set(spec) - supported[method] - {"method"}
    if unknown:
        raise EngineError(
            f"speculative_config keys {sorted(unknown)} are not supported for method {method!r} "
            f"on the {engine!r} engine; accepted keys: {sorted(supported[method])}"
        )
    k = spec.get("num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise EngineError(f"speculative_config.num_speculative_tokens must be an integer >= 1, got {k!r}")
