"""What an OpenAI-compatible server says of its own work, read as plain data.

Two sources: the server's Prometheus ``/metrics`` page (vLLM's ``vllm:spec_decode_*`` counters,
its KV-cache and scheduler gauges, the API process's memory), scraped before and after a run so
the run records deltas; and vLLM's per-request spec-decode metrics, which the last SSE event of a
stream carries (``metrics.speculative_decoding``). Text and JSON in, dicts of numbers out: no
HTTP here, so a reader for another server's page (SGLang, TensorRT-LLM) or a real Prometheus
parser lands in this module alone.
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeGuard

from .base import EngineError

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
        raise EngineError(
            f"{where}: metrics.speculative_decoding must be an object, got {type(metrics).__name__}"
        )
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
        raise EngineError(
            f"{where}: metrics.speculative_decoding.per_step_drafted/_accepted must be lists of counts"
        )
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
