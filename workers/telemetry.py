"""Resource sampling during a run: NVML on GPU hosts, process RSS and CPU time everywhere.

A daemon thread samples every ``interval_s`` (10 Hz by default):

- always: resident memory of this process and its children (bytes) and their CPU time
  (seconds), through psutil. The children list is refreshed once a second, since listing
  them scans ``/proc`` and would cost the replay loop more than the sample itself.
- on a host where NVML loads and sees a GPU (``pynvml`` from ``nvidia-ml-py``): per GPU,
  used memory (bytes), power (W), utilisation (%), and the total-energy counter (mJ,
  Volta and newer); energy over the window is the counter's difference, or the integral of
  power where the counter is not supported.

``stop()`` returns a summary with the keys of ``analysis.RunTelemetry`` (``peak_memory_bytes``,
``gpu_peak_memory_bytes``, ``mean_util``, ``energy_j``, ``cpu_time_s``) plus means, and
``samples``: at most ``max_points`` rows of ``[t_s, memory_bytes, util_pct, power_w]``
(t from the start, seconds; the memory is GPU memory on GPU hosts, RSS elsewhere).
"""

from __future__ import annotations

import os
import platform
import threading
import time
from types import ModuleType
from typing import Any

import psutil

_AUTO: Any = object()


def nvml_load() -> ModuleType | None:
    """The initialised ``pynvml`` module when it imports and sees at least one GPU, else None."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() < 1:
            pynvml.nvmlShutdown()
            return None
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no usable GPU here
        return None
    return pynvml


def hardware_describe(*, nvml: ModuleType | None = _AUTO) -> dict[str, Any]:
    """What the run ran on: CPU model and count, memory (bytes), and each GPU's name and memory."""
    cpu_model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass  # not Linux: platform's answer stands
    out: dict[str, Any] = {
        "cpu_model": cpu_model,
        "cpu_count": psutil.cpu_count(logical=True),
        "memory_bytes": psutil.virtual_memory().total,
        "gpus": [],
    }
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        # NVML lists every GPU of the host; which one this worker ran on is what it was given
        out["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    nvml = nvml_load() if nvml is _AUTO else nvml
    if nvml is not None:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            out["gpus"].append(
                {
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                }
            )
    return out


def descendant_pids(*, pid: int) -> list[int] | None:
    """Pids of a process's children, grandchildren, ..., from ``/proc/<pid>/task/<tid>/children``.

    psutil's ``children(recursive=True)`` reads every process's stat file: 2-10 ms with the
    GIL held on a busy host, once a second, which showed up as 10 ms stalls in the replay's
    send times. This reads only the family's own files. None where the kernel lacks them.
    """
    out: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            tids = os.listdir(f"/proc/{current}/task")
        except OSError:
            if current == pid:
                return None
            continue  # a descendant that exited meanwhile
        for tid in tids:
            try:
                with open(f"/proc/{current}/task/{tid}/children") as handle:
                    children = [int(p) for p in handle.read().split()]
            except FileNotFoundError:
                if current == pid and not os.path.exists(f"/proc/{current}/task/{tid}"):
                    continue  # the thread ended between listing and reading
                if current == pid:
                    return None
                continue
            except OSError:
                continue
            out += children
            todo += children
    return out


class TelemetrySampler:
    """Sample this process (and children) and, where present, the GPUs, until stopped."""

    def __init__(
        self,
        *,
        interval_s: float = 0.1,
        nvml: ModuleType | None = _AUTO,
        max_points: int = 300,
        gpu_indices: list[int] | None = None,
    ):
        self.interval_s = interval_s
        self.max_points = max_points
        self._nvml = nvml_load() if nvml is _AUTO else nvml
        self._gpu_indices = gpu_indices
        self._handles: list[Any] = []
        self._process = psutil.Process()
        self._children: list[psutil.Process] = []
        self._children_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rows: list[tuple[float, int, float | None, float | None, float | None]] = []
        self._cpu_start = 0.0
        self._cpu_end = 0.0
        self._energy_start: float | None = None
        self._energy_end: float | None = None
        self._t0 = 0.0
        self._t1 = 0.0

    @property
    def gpu(self) -> bool:
        return self._nvml is not None

    def start(self) -> None:
        if self._nvml is not None:
            nvml = self._nvml
            indices = self._gpu_indices if self._gpu_indices is not None else range(nvml.nvmlDeviceGetCount())
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
            self._energy_start = self._energy_total_mj()
        self._t0 = time.perf_counter()
        self._sample()  # also lists the children, whose CPU time so far must not count
        self._cpu_start = self._cpu_seconds()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="telemetry")
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop sampling and summarise (bytes, seconds, watts, joules, percent)."""
        if self._thread is None:
            raise RuntimeError("telemetry sampler was not started")
        self._stop.set()
        self._thread.join()
        self._sample()
        self._t1 = time.perf_counter()
        self._cpu_end = self._cpu_seconds()
        if self._nvml is not None:
            self._energy_end = self._energy_total_mj()
        return self.summary()

    def _loop(self) -> None:
        next_at = time.perf_counter() + self.interval_s
        while not self._stop.wait(max(0.0, next_at - time.perf_counter())):
            self._sample()
            next_at += self.interval_s

    def _rss_bytes(self) -> int:
        now = time.perf_counter()
        if now - self._children_at > 1.0:
            pids = descendant_pids(pid=self._process.pid)
            if pids is None:  # no /proc/<pid>/task/<tid>/children here: psutil's full scan
                try:
                    self._children = self._process.children(recursive=True)
                except psutil.Error:
                    self._children = []
            else:
                known = {c.pid: c for c in self._children}
                self._children = []
                for pid in pids:
                    try:
                        self._children.append(known.get(pid) or psutil.Process(pid))
                    except psutil.Error:
                        pass  # exited since it was listed
            self._children_at = now
        total = self._process.memory_info().rss
        for child in self._children:
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass  # a child that exited since the last listing holds no memory
        return total

    def _cpu_seconds(self) -> float:
        times = self._process.cpu_times()
        # children_* covers children that exited and were waited for; live ones are added below.
        total = times.user + times.system + times.children_user + times.children_system
        for child in self._children:
            try:
                child_times = child.cpu_times()
                total += child_times.user + child_times.system
            except psutil.Error:
                pass
        return total

    def _energy_total_mj(self) -> float | None:
        assert self._nvml is not None
        try:
            return float(sum(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self._handles))
        except Exception:  # NVMLError_NotSupported on pre-Volta GPUs: integrate power instead
            return None

    def _sample(self) -> None:
        t = time.perf_counter()
        rss = self._rss_bytes()
        gpu_mem = util = power = None
        if self._nvml is not None:
            nvml = self._nvml
            gpu_mem = float(sum(nvml.nvmlDeviceGetMemoryInfo(h).used for h in self._handles))
            util = sum(float(nvml.nvmlDeviceGetUtilizationRates(h).gpu) for h in self._handles) / len(
                self._handles
            )
            try:
                power = sum(nvml.nvmlDeviceGetPowerUsage(h) for h in self._handles) / 1000.0
            except Exception:  # power readings are not supported on every board
                power = None
        self._rows.append((t, rss, gpu_mem, util, power))

    def summary(self) -> dict[str, Any]:
        rows = list(self._rows)
        rss = [r[1] for r in rows]
        gpu_mem = [r[2] for r in rows if r[2] is not None]
        utils = [r[3] for r in rows if r[3] is not None]
        powers = [(r[0], r[4]) for r in rows if r[4] is not None]
        energy_j = None
        if self._energy_start is not None and self._energy_end is not None:
            energy_j = (self._energy_end - self._energy_start) / 1000.0
        elif len(powers) > 1:
            energy_j = sum(
                (t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(powers, powers[1:], strict=False)
            )
        return {
            "source": "nvml" if self._nvml is not None else "psutil",
            "duration_s": (self._t1 or time.perf_counter()) - self._t0,
            "num_samples": len(rows),
            "peak_memory_bytes": max(rss) if rss else None,
            "mean_memory_bytes": sum(rss) / len(rss) if rss else None,
            "cpu_time_s": self._cpu_end - self._cpu_start if self._cpu_end else None,
            "gpu_peak_memory_bytes": int(max(gpu_mem)) if gpu_mem else None,
            "gpu_mean_memory_bytes": sum(gpu_mem) / len(gpu_mem) if gpu_mem else None,
            "mean_util": sum(utils) / len(utils) if utils else None,
            "peak_power_w": max(p for _, p in powers) if powers else None,
            "mean_power_w": sum(p for _, p in powers) / len(powers) if powers else None,
            "energy_j": energy_j,
            "samples": self._downsampled(rows),
        }

    def _downsampled(self, rows: list[tuple[float, int, float | None, float | None, float | None]]) -> list:
        """Rows of [t_s, memory_bytes, util_pct, power_w]; each kept row is a bucket's maximum memory
        (peaks matter more than averages for memory), with that bucket's mean util and power."""
        if not rows:
            return []
        size = max(1, -(-len(rows) // self.max_points))
        out = []
        for i in range(0, len(rows), size):
            bucket = rows[i : i + size]
            mem = max((r[2] if r[2] is not None else r[1]) for r in bucket)
            utils = [r[3] for r in bucket if r[3] is not None]
            powers = [r[4] for r in bucket if r[4] is not None]
            out.append(
                [
                    round(bucket[0][0] - self._t0, 3),
                    int(mem),
                    round(sum(utils) / len(utils), 1) if utils else None,
                    round(sum(powers) / len(powers), 1) if powers else None,
                ]
            )
        return out


# What ``kv_state()`` of an engine that preallocates its KV cache (vLLM) returns: gauges sampled
# during the run, a cumulative counter, and the capacity fixed at start-up (after the drafter loaded).
KV_GAUGES = ("kv_cache_usage_perc", "num_requests_running", "num_requests_waiting")
KV_CAPACITY = ("kv_cache_tokens", "kv_blocks", "kv_cpu_blocks", "block_size")


class KvSampler:
    """Sample an engine's ``kv_state()`` (KV-cache usage, running and waiting requests) until stopped.

    vLLM preallocates its KV cache whatever the arm, so device memory says nothing about a
    drafter; what a drafter costs is KV capacity taken from live requests, which shows as
    higher cache usage, more preemptions and more waiting requests. ``kv_state`` is called in
    this thread (every ``interval_s``, 0.5 s: a /metrics scrape is a few milliseconds) and
    returns ``{}`` where nothing can be read; a failing read is skipped, not fatal. When the
    read before the window yields nothing (a server that exports no KV figures), nothing is
    sampled during the run: an open-loop replay should not pay for scrapes that say nothing.

    ``stop()`` returns ``{"kv_cache_tokens", "kv_blocks", "kv_cpu_blocks", "block_size"`` (from
    the engine's start-up figures, where known), ``"preemptions"`` (counter delta over the
    window), ``"kv_usage_peak"``/``"kv_usage_mean"`` (fraction 0-1), ``"running_peak"``,
    ``"running_mean"``, ``"waiting_peak"``, ``"num_samples"``, ``"samples"``: at most
    ``max_points`` rows of ``[t_s, kv_usage, running, waiting]``}`` or ``{}`` when no read
    returned anything.
    """

    def __init__(self, *, read: Any, interval_s: float = 0.5, max_points: int = 300):
        self._read = read
        self.interval_s = interval_s
        self.max_points = max_points
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rows: list[tuple[float, dict[str, Any]]] = []
        self._t0 = 0.0
        self._started = False

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._started = True
        self._sample()  # the counter's value before the window
        if not self._rows:
            return  # nothing to read (a server that exports no KV figures): no scraping during the run
        self._thread = threading.Thread(target=self._loop, daemon=True, name="kv-telemetry")
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        if not self._started:
            raise RuntimeError("KV sampler was not started")
        if self._thread is None:
            return {}
        self._stop.set()
        self._thread.join()
        self._sample()
        return kv_summary(rows=self._rows, max_points=self.max_points)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        try:
            state = self._read()
        except Exception:  # noqa: BLE001 - a server that stops answering for a moment is not a failed run
            return
        if isinstance(state, dict) and state:
            self._rows.append((time.perf_counter() - self._t0, state))


def kv_summary(*, rows: list[tuple[float, dict[str, Any]]], max_points: int = 300) -> dict[str, Any]:
    """The summary of :class:`KvSampler` from its rows of ``(t_s, kv_state)``."""
    if not rows:
        return {}

    def values(key: str) -> list[float]:
        return [float(s[key]) for _, s in rows if _is_real(s.get(key))]

    out: dict[str, Any] = {}
    for key in KV_CAPACITY:
        known = values(key)
        out[key] = int(known[-1]) if known else None
    preempt = values("num_preemptions")
    out["preemptions"] = int(preempt[-1] - preempt[0]) if len(preempt) >= 2 else None
    usage, running, waiting = values("kv_cache_usage_perc"), values("num_requests_running"), values("num_requests_waiting")
    out["kv_usage_peak"] = max(usage) if usage else None
    out["kv_usage_mean"] = sum(usage) / len(usage) if usage else None
    out["running_peak"] = int(max(running)) if running else None
    out["running_mean"] = sum(running) / len(running) if running else None
    out["waiting_peak"] = int(max(waiting)) if waiting else None
    out["num_samples"] = len(rows)
    size = max(1, -(-len(rows) // max_points))
    out["samples"] = [
        [round(t, 3), *(s.get(k) if _is_real(s.get(k)) else None for k in KV_GAUGES)] for t, s in rows[::size]
    ]
    return out


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value
