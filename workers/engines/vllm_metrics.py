"""What vLLM says of its own work, read in-process: spec-decode and token counters, KV-cache
state and capacity, and the GPU memory of its engine processes.

The counters and gauges come from vLLM's in-process Prometheus registry
(``vllm.v1.metrics.reader.get_metrics_snapshot``, the API behind ``LLM.get_metrics()``) under
vLLM's names without ``vllm:`` and ``_total``, the same keys as the ``openai`` engine's scrape.
Called only on a started engine, so vLLM is imported here only then.
"""

from __future__ import annotations

from typing import Any

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


def metrics_counters() -> dict[str, Any]:
    """vLLM's counters now, totals since the engine started: tokens and verification steps
    (``spec_decode_num_accepted_tokens_per_pos`` a list by draft position)."""
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


def metrics_kv_state(*, cache_config: Any) -> dict[str, Any]:
    """KV-cache state now: the capacity in ``cache_config`` (:func:`kv_capacity`), the gauges
    ``kv_cache_usage_perc`` (fraction 0-1, averaged over engines), ``num_requests_running`` and
    ``num_requests_waiting`` (summed), and the counter ``num_preemptions`` (total since start)."""
    from vllm.v1.metrics.reader import Counter, Gauge, get_metrics_snapshot

    out: dict[str, Any] = kv_capacity(cache_config)
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
