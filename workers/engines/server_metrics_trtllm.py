"""TensorRT-LLM's ``/metrics`` read as plain data: per-iteration statistics, summed.

``trtllm-serve``'s ``/metrics`` is not Prometheus text: it returns a JSON list of the iteration
statistics the executor queued since the previous poll (``get_iteration_stats`` drains
``get_stats_async``; ``tensorrt_llm/serve/openai_server.py``, NVIDIA/TensorRT-LLM at commit
00057725d9a6591f033e44f31c219e2426827bb7). Each poll consumes what it returns, so the engine
polls through the run and keeps running sums (:class:`IterationTotals`); the run's figures are
the difference of the sums at its start and end, labelled ``"summed iteration statistics"``.
With the PyTorch backend the server queues them only when started with
``enable_iter_perf_stats: true``; with ``return_perf_metrics`` its own background collector
drains the same queue for ``/prometheus/metrics``, which this module does not read (its metric
names were not checked here).

Field names are the executor's JSON (``cpp/include/tensorrt_llm/executor/types.h``, commit
a98a9061d72f6fd39f5d055ebdd2c6878a100e2c):

- ``specDecodingStats``: ``numDraftTokens`` (draft tokens proposed, all requests),
  ``numAcceptedTokens`` (draft tokens accepted), ``numRequestsWithDraftTokens`` (requests with at
  least one draft token: vLLM's drafts, one per request per step), ``acceptanceLength`` (the
  iteration's mean, not summed: recomputed from the sums). The PyTorch executor creates it only
  when a speculative config or a spec resource manager exists
  (``tensorrt_llm/_torch/pyexecutor/py_executor.py``, the code index's version at commit
  9521caf4696c1fb79b0f946f0d980f8f0ebd3e64), so iterations without it are a server that does
  not speculate.
- ``kvCacheStats``: ``maxNumBlocks``, ``usedNumBlocks``, ``tokensPerBlock``;
  ``numActiveRequests`` and ``numQueuedRequests`` at the top level. Nothing in them counts
  preemptions (``inflightBatchingStats.numPausedRequests`` is a per-iteration gauge), so
  preemptions are not measured on this server.
"""

from __future__ import annotations

import json
import threading
from typing import Any

SUMMED_ITERATIONS = "summed iteration statistics"
SPEC_FIELDS = {
    "numRequestsWithDraftTokens": "spec_decode_num_drafts",
    "numDraftTokens": "spec_decode_num_draft_tokens",
    "numAcceptedTokens": "spec_decode_num_accepted_tokens",
}


def is_iteration_stats(*, text: str) -> bool:
    """Whether a ``/metrics`` body is TensorRT-LLM's JSON list rather than Prometheus text."""
    return text.lstrip()[:1] == "["


def trtllm_iterations(*, text: str) -> tuple[list[dict[str, Any]], str | None]:
    """The iterations of one poll and an error (or None). Entries that are JSON strings rather
    than objects are decoded too (an assumption for older LLM APIs, not checked in the source);
    entries that are neither are skipped and reported."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        return [], f"the iteration statistics are not JSON: {exc}"
    if not isinstance(raw, list):
        return [], f"the iteration statistics are a {type(raw).__name__}, not a list"
    out, bad = [], 0
    for entry in raw:
        if isinstance(entry, str):
            try:
                entry = json.loads(entry)
            except ValueError:
                entry = None
        if isinstance(entry, dict):
            out.append(entry)
        else:
            bad += 1
    return out, (f"{bad} of {len(raw)} iteration entries are not objects" if bad else None)


def trtllm_kv_state(*, iteration: dict[str, Any]) -> dict[str, Any]:
    """KV-cache state of one iteration, under the keys ``prometheus_kv_state`` uses:
    ``kv_cache_usage_perc`` (used / max blocks, 0-1), ``kv_blocks``, ``block_size`` (tokens),
    ``kv_cache_tokens`` (blocks x block size), ``num_requests_running``, ``num_requests_waiting``."""
    out: dict[str, Any] = {}
    kv = iteration.get("kvCacheStats")
    if isinstance(kv, dict) and _count(kv.get("maxNumBlocks")) and kv["maxNumBlocks"] > 0:
        blocks = int(kv["maxNumBlocks"])
        out["kv_blocks"] = blocks
        if _count(kv.get("usedNumBlocks")):
            out["kv_cache_usage_perc"] = int(kv["usedNumBlocks"]) / blocks
        if _count(kv.get("tokensPerBlock")):
            out["block_size"] = int(kv["tokensPerBlock"])
            out["kv_cache_tokens"] = blocks * out["block_size"]
    for field, key in (
        ("numActiveRequests", "num_requests_running"),
        ("numQueuedRequests", "num_requests_waiting"),
    ):
        if _count(iteration.get(field)):
            out[key] = int(iteration[field])
    return out


class IterationTotals:
    """Running sums over every iteration the engine has polled since it started (thread-safe:
    the KV sampler polls from its own thread, ``counters()`` from the replay's).

    :meth:`counters` returns them as counters, so a run's delta is the sum over the iterations
    polled between its two reads: ``spec_decode_num_drafts``/``_draft_tokens``/``_accepted_tokens``
    (tokens; drafts are requests with draft tokens per iteration), ``server_iterations``
    (iterations seen), ``server_polls_failed`` (polls whose body could not be read: their
    iterations are lost), ``spec_decode_source``, ``metrics_error`` (the last failed poll's since
    the previous call) and, when no iteration carried ``specDecodingStats``, ``spec_decode: "not
    configured"``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums = dict.fromkeys(SPEC_FIELDS.values(), 0)
        self._iterations = 0
        self._spec_iterations = 0
        self._failed = 0
        self._error: str | None = None  # the last failed poll's, until counters() reports it
        self._kv: dict[str, Any] = {}

    def fold(self, *, text: str) -> str | None:
        """Add one poll's iterations; returns its error, if any."""
        iterations, error = trtllm_iterations(text=text)
        with self._lock:
            if error:
                self._failed += 1
                self._error = error
            for iteration in iterations:
                self._iterations += 1
                spec = iteration.get("specDecodingStats")
                if isinstance(spec, dict):
                    self._spec_iterations += 1
                    for field, key in SPEC_FIELDS.items():
                        self._sums[key] += int(spec[field]) if _count(spec.get(field)) else 0
                self._kv = trtllm_kv_state(iteration=iteration) or self._kv
        return error

    def kv_state(self) -> dict[str, Any]:
        """The last polled iteration's KV state and ``server_iterations``: never empty, so the
        sampler keeps polling (and so summing) through a run that starts idle."""
        with self._lock:
            return {**self._kv, "server_iterations": self._iterations}

    def counters(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = {
                **self._sums,
                "server_iterations": self._iterations,
                "server_polls_failed": self._failed,
                "spec_decode_source": SUMMED_ITERATIONS,
            }
            if self._iterations and not self._spec_iterations:
                out["spec_decode"] = "not configured"
            if self._error:
                out["metrics_error"], self._error = self._error, None
            return out


def _count(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 and value == value
