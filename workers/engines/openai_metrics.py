"""What an OpenAI-compatible server says of its own work, read as plain data.

Two sources: the server's ``/metrics`` page, and vLLM's per-request spec-decode metrics, which
the last SSE event of a stream carries (``metrics.speculative_decoding``). Text and JSON in,
dicts of numbers out: no HTTP here.

``/metrics`` is parsed by ``prometheus_client``'s text parser (NaN and +-Inf samples, legal in the
format, are left out; a page it cannot parse keeps the samples read before the bad line and
says so in ``metrics_error``), and each server's names are mapped as its source defines them:

==============  ==========================================  =======================================
server          spec decode                                 how a run reads it
==============  ==========================================  =======================================
vLLM (V1)       ``vllm:spec_decode_num_*`` counters          before/after deltas (``counters()``)
SGLang          ``sglang:spec_accept_length`` gauge          sampled through the run (``spec_sampled``)
TensorRT-LLM    ``specDecodingStats`` per iteration (JSON)   polled through the run and summed
==============  ==========================================  =======================================

The engine keeps what must outlive one scrape in a :class:`MetricsWindow`: the SGLang gauge
readings since the last ``counters()`` (the KV sampler's reads during the replay), summarised
by the ``counters()`` after the run into ``spec_sampled``, a dict that ``counters_delta`` passes
through as the after-read's value; and TensorRT-LLM's running iteration sums
(:class:`.server_metrics_trtllm.IterationTotals`), which ``counters_delta`` differences like
vLLM's counters. vLLM's names are from ``vllm/v1/spec_decode/metrics.py`` (``SpecDecodingProm``,
vllm-project/vllm at commit 016a8587edb04ae53c913a1da9355a07dc0ca4ae) and
``vllm/v1/metrics/loggers.py`` (commit a6f0308cfe806b7731ad4979c9bea6e470c35efd); SGLang's and
TensorRT-LLM's in :mod:`.server_metrics_sglang` and :mod:`.server_metrics_trtllm`.
"""

from __future__ import annotations

import math
import threading
from typing import Any, TypeGuard

from prometheus_client.parser import text_string_to_metric_families

from .base import EngineError
from .server_metrics_sglang import sampled_gauge_summary, sglang_kv_state, sglang_spec_reading
from .server_metrics_trtllm import IterationTotals, is_iteration_stats

Sample = tuple[str, dict[str, str], float]

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
# Which server wrote a Prometheus page, by its names' prefix.
FAMILIES = {"vllm:": "vllm", "sglang:": "sglang"}


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


def prometheus_parse(*, text: str) -> tuple[list[Sample], str | None]:
    """Parse Prometheus text exposition into (name, labels, value) samples and an error (None
    when the whole page parsed). ``NaN`` and ``+Inf``/``-Inf`` are no measurement and are left
    out: they would break the counts and cannot be stored as JSON. A line the parser refuses
    ends the parse: the samples before it are kept, and the error says where it stopped."""
    samples: list[Sample] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                value = float(sample.value)
                if math.isfinite(value):
                    samples.append((sample.name, dict(sample.labels), value))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        return samples, f"/metrics is not Prometheus text after {len(samples)} samples: {exc}"
    return samples, None


def prometheus_samples(*, text: str) -> list[Sample]:
    """:func:`prometheus_parse`'s samples, without the error."""
    return prometheus_parse(text=text)[0]


def server_family(*, samples: list[Sample]) -> str | None:
    """``"vllm"`` or ``"sglang"`` by the page's names, None for a page of neither."""
    for name, _, _ in samples:
        for prefix, family in FAMILIES.items():
            if name.startswith(prefix):
                return family
    return None


def prometheus_spec_counters(*, text: str) -> dict[str, Any]:
    """vLLM's spec-decode counters from a ``/metrics`` page, summed over engines and models.

    Returns counts in tokens (drafts in verification steps) keyed by the counter's name
    without its ``vllm:`` prefix and ``_total`` suffix; ``..._per_pos`` is a list indexed
    by draft position. vLLM registers its spec-decode counters only when it was started with
    a speculative config, so a vLLM page (any ``vllm:`` sample) without them is a server that
    does not speculate: its totals read 0 and ``spec_decode`` says ``"not configured"`` (not
    inferred from a page that did not parse to its end: the counters may have been past the
    bad line). Another server's page has no counters (SGLang's spec figures are gauges, read by
    :class:`MetricsWindow`); ``server_rss_bytes`` and ``kv_cache_usage_perc`` where the page
    has them; ``metrics_error`` for a page that did not parse.
    """
    samples, error = prometheus_parse(text=text)
    out = _vllm_counters(samples=samples, complete=error is None)
    if error:
        out["metrics_error"] = error
    return out


def _vllm_counters(*, samples: list[Sample], complete: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    per_pos: dict[int, float] = {}
    family = server_family(samples=samples)
    if (
        complete
        and family == "vllm"
        and not any(name.startswith("vllm:spec_decode_") for name, _, _ in samples)
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
    if family == "sglang":
        usage = sglang_kv_state(samples=samples).get("kv_cache_usage_perc")
        if usage is not None:
            out["kv_cache_usage_perc"] = usage
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
    """KV-cache state from a ``/metrics`` page: ``kv_cache_usage_perc`` (fraction 0-1),
    ``num_requests_running``/``num_requests_waiting``, ``num_preemptions`` (counter total) and
    the capacity where the server exports it (``kv_cache_tokens``, ``kv_blocks``,
    ``kv_cpu_blocks``, ``block_size``); SGLang's page adds its spec-decode gauges
    (:func:`.server_metrics_sglang.sglang_kv_state`). Keys a page lacks are absent: a server
    that does not say is not measured. What a page that did not parse to its end still says is
    returned."""
    samples = prometheus_samples(text=text)
    if server_family(samples=samples) == "sglang":
        return sglang_kv_state(samples=samples)
    return _vllm_kv_state(samples=samples)


def _vllm_kv_state(*, samples: list[Sample]) -> dict[str, Any]:
    """vLLM's: ``kv_cache_usage_perc`` (mean over engines), ``num_requests_running``/``_waiting``
    (summed over engines), ``num_preemptions``, and the capacity from ``vllm:cache_config_info``:
    ``kv_cache_tokens`` (``kv_cache_size_tokens``, else blocks x block size), ``kv_blocks``,
    ``kv_cpu_blocks``, ``block_size``."""
    out: dict[str, Any] = {}
    usage: list[float] = []
    engines: list[dict[str, Any]] = []
    for name, labels, value in samples:
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


class MetricsWindow:
    """What the ``openai`` engine keeps of one server's ``/metrics`` between scrapes.

    ``kv_state(text=...)`` is the KV sampler's read during a run; ``counters(text=...)`` the
    read before and after it. SGLang's spec-decode gauges read by ``kv_state`` since the last
    ``counters`` (and the one ``counters`` reads) become ``spec_sampled``
    (:func:`.server_metrics_sglang.sampled_gauge_summary`); TensorRT-LLM's iteration lists are
    summed by every read. Thread-safe: the sampler reads from its own thread.

    A gauge holds its last interval's value until the next: each reading counts once, so the
    mean is over time, and the sampler's first read (before the first request is sent) carries
    the server's last interval before the run (the warm-up's, on the same server and config).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readings: list[dict[str, float]] = []
        self.iterations = IterationTotals()

    def kv_state(self, *, text: str) -> dict[str, Any]:
        if is_iteration_stats(text=text):
            self.iterations.fold(text=text)
            return self.iterations.kv_state()
        state = prometheus_kv_state(text=text)
        reading = sglang_spec_reading(state=state)
        if reading is not None:
            with self._lock:
                self._readings.append(reading)
        return state

    def counters(self, *, text: str) -> dict[str, Any]:
        if is_iteration_stats(text=text):
            self.iterations.fold(text=text)
            return self.iterations.counters()
        out = prometheus_spec_counters(text=text)
        reading = sglang_spec_reading(state=prometheus_kv_state(text=text))
        with self._lock:
            readings, self._readings = self._readings, []
        if reading is not None:
            out["spec_sampled"] = sampled_gauge_summary(readings=[*readings, reading])
        return out

    def memory(self, *, text: str) -> dict[str, Any]:
        """``server_rss_bytes`` and ``kv_cache_usage_perc`` where the server says them; reads
        without closing the sampling window."""
        if is_iteration_stats(text=text):
            self.iterations.fold(text=text)
            state = self.iterations.kv_state()
        else:
            state = prometheus_spec_counters(text=text)
        return {k: state[k] for k in ("server_rss_bytes", "kv_cache_usage_perc") if k in state}
