"""Telemetry: the CPU path for real; NVML through a fake module at its one seam."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

from workers.telemetry import KvSampler, TelemetrySampler, descendant_pids, hardware_describe, kv_summary


def test_it_sees_the_memory_of_a_child_process_and_counts_cpu_time():
    sampler = TelemetrySampler(interval_s=0.1, nvml=None)
    sampler.start()
    baseline = sampler.summary()["peak_memory_bytes"]
    # A child that holds 200 MB for a second, and a busy loop here for 0.5 s of CPU.
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.5)",
        ]
    )
    busy_until = time.process_time() + 0.5
    while time.process_time() < busy_until:
        pass
    child.wait(30)
    time.sleep(0.2)
    summary = sampler.stop()
    assert summary["source"] == "psutil"
    assert summary["peak_memory_bytes"] >= baseline + 180 * 2**20
    assert summary["cpu_time_s"] >= 0.45
    assert summary["gpu_peak_memory_bytes"] is None and summary["energy_j"] is None


def test_it_samples_at_about_10_hz_and_downsamples_the_series():
    sampler = TelemetrySampler(interval_s=0.1, max_points=5, nvml=None)
    sampler.start()
    time.sleep(2.0)
    summary = sampler.stop()
    # 20 intervals plus the first and last samples; a loaded machine may delay a few.
    assert 10 <= summary["num_samples"] <= 23
    assert len(summary["samples"]) <= 5
    t, memory, util, power = summary["samples"][-1]
    assert 1.0 <= t <= 2.2 and memory > 0 and util is None and power is None
    assert summary["duration_s"] == pytest.approx(2.0, abs=0.3)


class FakeNVML:
    """Two GPUs whose readings follow a script: the shape of pynvml's API, nothing more."""

    def __init__(self, *, energy_supported: bool = True):
        self.tick = 0
        self.energy_supported = energy_supported

    def nvmlDeviceGetCount(self):  # noqa: N802 - pynvml's names
        return 2

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        return index

    def nvmlDeviceGetName(self, handle):  # noqa: N802
        return b"NVIDIA H200" if handle == 0 else "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        self.tick += 1
        used = (1 + handle) * 10**9 + (min(self.tick, 10) * 10**8 if handle == 0 else 0)
        return SimpleNamespace(used=used, total=80 * 10**9)

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        return SimpleNamespace(gpu=50 if handle == 0 else 70, memory=10)

    def nvmlDeviceGetPowerUsage(self, handle):  # noqa: N802
        return 100_000 if handle == 0 else 200_000  # milliwatts

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # noqa: N802
        if not self.energy_supported:
            raise RuntimeError("NVMLError_NotSupported")
        return 1_000_000 * (1 + handle) + int(time.perf_counter() * 1e6) * (1 + handle)  # millijoules


def test_it_reads_gpu_memory_power_energy_and_utilisation_through_nvml():
    fake = FakeNVML()
    sampler = TelemetrySampler(interval_s=0.05, nvml=fake)  # type: ignore[arg-type]
    assert sampler.gpu
    sampler.start()
    time.sleep(0.6)
    summary = sampler.stop()
    assert summary["source"] == "nvml"
    # GPU 0 climbs to 2.0 GB, GPU 1 stays at 2 GB: the peak of the sum is 4 GB.
    assert summary["gpu_peak_memory_bytes"] == 4 * 10**9
    assert summary["mean_util"] == pytest.approx(60.0)
    assert summary["peak_power_w"] == pytest.approx(300.0)
    # The fake counter grows by 1 mJ per microsecond per GPU weight (1 + 2 = 3 kJ/s).
    assert summary["energy_j"] == pytest.approx(3000 * summary["duration_s"], rel=0.05)
    assert summary["samples"][-1][1] == 4 * 10**9  # the series shows GPU memory on GPU hosts
    assert summary["peak_memory_bytes"] > 0  # and the process RSS is still there


def test_it_integrates_power_when_the_energy_counter_is_not_supported():
    sampler = TelemetrySampler(interval_s=0.05, nvml=FakeNVML(energy_supported=False))  # type: ignore[arg-type]
    sampler.start()
    time.sleep(0.5)
    summary = sampler.stop()
    assert summary["energy_j"] == pytest.approx(300.0 * summary["duration_s"], rel=0.1)


def test_it_refuses_to_stop_before_it_started():
    with pytest.raises(RuntimeError, match="not started"):
        TelemetrySampler(nvml=None).stop()


def test_it_describes_the_cpu_and_the_gpus():
    here = hardware_describe(nvml=None)
    assert here["cpu_count"] >= 1 and here["memory_bytes"] > 2**30 and here["cpu_model"]
    assert here["gpus"] == []
    gpus = hardware_describe(nvml=FakeNVML())["gpus"]  # type: ignore[arg-type]
    assert [g["name"] for g in gpus] == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    assert [g["memory_bytes"] for g in gpus] == [80 * 10**9, 80 * 10**9]


def test_it_finds_grandchildren_without_scanning_every_process():
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3)']); time.sleep(3)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        grandchildren: list[int] = []
        while time.monotonic() < deadline and not grandchildren:
            found = descendant_pids(pid=os.getpid()) or []
            grandchildren = [p for p in found if p != child.pid and psutil.Process(p).ppid() == child.pid]
            time.sleep(0.05)
        assert child.pid in found and len(grandchildren) == 1
    finally:
        child.kill()
        child.wait()


def test_it_summarises_kv_state_samples_with_the_counter_delta_and_the_start_up_capacity():
    rows = [
        (
            0.0,
            {
                "kv_cache_usage_perc": 0.0,
                "num_requests_running": 0,
                "num_requests_waiting": 0,
                "num_preemptions": 4,
                "kv_cache_tokens": 8192,
                "kv_blocks": 512,
                "block_size": 16,
            },
        ),
        (
            0.5,
            {
                "kv_cache_usage_perc": 0.75,
                "num_requests_running": 6,
                "num_requests_waiting": 2,
                "num_preemptions": 5,
                "kv_cache_tokens": 8192,
                "kv_blocks": 512,
                "block_size": 16,
            },
        ),
        (
            1.0,
            {
                "kv_cache_usage_perc": 0.25,
                "num_requests_running": 2,
                "num_requests_waiting": 0,
                "num_preemptions": 7,
                "kv_cache_tokens": 8192,
                "kv_blocks": 512,
                "block_size": 16,
            },
        ),
    ]
    kv = kv_summary(rows=rows, max_points=2)
    assert kv["kv_cache_tokens"] == 8192 and kv["kv_blocks"] == 512 and kv["block_size"] == 16
    assert kv["kv_cpu_blocks"] is None  # the engine did not say
    assert kv["preemptions"] == 3
    assert kv["kv_usage_peak"] == 0.75 and kv["kv_usage_mean"] == pytest.approx(1 / 3)
    assert kv["running_peak"] == 6 and kv["waiting_peak"] == 2 and kv["num_samples"] == 3
    assert kv["samples"] == [[0.0, 0.0, 0, 0], [1.0, 0.25, 2, 0]]  # downsampled to at most 2 rows


def test_it_leaves_preemptions_unmeasured_without_two_readings_and_skips_failed_reads():
    readings = iter([{"kv_cache_tokens": 64}, RuntimeError("server restarting"), {"kv_cache_usage_perc": 0.5}])

    def read():
        value = next(readings, {})
        if isinstance(value, Exception):
            raise value
        return value

    sampler = KvSampler(read=read, interval_s=0.01)
    sampler.start()
    time.sleep(0.05)
    kv = sampler.stop()
    assert kv["num_samples"] == 2 and kv["kv_usage_peak"] == 0.5 and kv["kv_cache_tokens"] == 64
    assert kv["preemptions"] is None  # no counter read at all
    calls = []
    empty = KvSampler(read=lambda: calls.append(1) or {}, interval_s=0.01)
    empty.start()
    time.sleep(0.05)
    assert empty.stop() == {}  # an engine with nothing to say leaves no KV summary at all...
    assert len(calls) == 1  # ...and is not asked again during the run
    with pytest.raises(RuntimeError, match="not started"):
        KvSampler(read=dict).stop()
