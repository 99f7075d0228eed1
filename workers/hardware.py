"""What machine a run ran on, for the run record and the decision's evidence bundle."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

import psutil


def hardware_describe() -> dict:
    info: dict = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
    }
    info["memory_bytes"] = psutil.virtual_memory().total
    info.update(_gpus())
    return info


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _gpus() -> dict:
    """GPU names and memory through torch.cuda: the one seam that needs a GPU to say anything."""
    try:
        import torch

        if not torch.cuda.is_available():
            return {"gpus": []}
        return {
            "gpus": [
                {
                    "name": torch.cuda.get_device_name(i),
                    "memory_bytes": torch.cuda.get_device_properties(i).total_memory,
                }
                for i in range(torch.cuda.device_count())
            ]
        }
    except Exception as exc:  # a broken driver must not fail the run record
        return {"gpus": [], "gpu_error": str(exc)}
