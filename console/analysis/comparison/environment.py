"""Did every run of the comparison run on the same machine class, driver and software: the
``environment`` section, from each run's recorded ``hardware`` (``workers.hardware``) and
``versions`` (the engine's ``versions()``).

Compared, where a run recorded them:

- hardware class: on GPU hosts (any run recorded a GPU) the GPU count, names and memory
  (bytes, per GPU); on CPU hosts the CPU model and count. Host memory is not compared (identical
  machines report totals a few MB apart), nor the GPU index, UUID or bus id of an entry.
- driver: :data:`DRIVER_FIELDS` in the hardware or versions record (not recorded by today's
  workers: compared once they are).
- engine and libraries: :data:`VERSION_FIELDS` (``server`` is the openai engine's server version).

Never compared: hostnames, worker names, PIDs, times (``load_s``, ``start_s``), URLs, models
and dtypes (the arms' configs, not the machine). A field one run did not record is compared
among the runs that did, and said in ``notes``. Every run must agree, repeats of one arm
included: the noise floor is measured between them.

Pure Python; no Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

CPU_FIELDS = ("cpu_model", "cpu_count")
GPU_FIELDS = ("gpu_count", "gpu_names", "gpu_memory_bytes")
DRIVER_FIELDS = ("nvidia_driver", "driver_version", "cuda", "cuda_version", "cuda_driver")
VERSION_FIELDS = ("engine", "platform", "device", "vllm", "vllm_distribution", "torch", "transformers", "server", "httpx")


def _fields(hardware: Mapping[str, Any], versions: Mapping[str, Any], *, gpu_hosts: bool) -> dict[str, str]:
    """The compared fields one run recorded, as text."""
    out: dict[str, str] = {}
    gpus = hardware.get("gpus")
    if gpu_hosts and isinstance(gpus, list):
        out["gpu_count"] = str(len(gpus))
        out["gpu_names"] = ", ".join(sorted(str(g.get("name")) for g in gpus if isinstance(g, Mapping)))
        out["gpu_memory_bytes"] = ", ".join(
            sorted(str(g.get("memory_bytes")) for g in gpus if isinstance(g, Mapping))
        )
    elif not gpu_hosts:
        out |= {f: str(hardware[f]) for f in CPU_FIELDS if hardware.get(f) not in (None, "")}
    for f in DRIVER_FIELDS:
        value = hardware.get(f, versions.get(f))
        if value not in (None, ""):
            out[f] = str(value)
    out |= {f: str(versions[f]) for f in VERSION_FIELDS if versions.get(f) not in (None, "")}
    return out


def environment_check(*, run_environments: Mapping[int, Mapping[str, Any]], runs: pd.DataFrame) -> dict[str, Any]:
    """The ``environment`` section: ``fields`` (compared), ``n_runs_recorded``, ``mismatches``
    (``field``, ``values`` [{``value``, ``arms``, ``run_ids``}], ``message``) and ``notes``.
    ``run_environments`` maps a run id to ``{"hardware", "versions"}``; ``runs`` has ``run_id``
    and ``arm``."""
    arm_of = {int(r): str(a) for r, a in zip(runs["run_id"], runs["arm"], strict=True)}
    recorded = {
        run_id: (dict(env.get("hardware") or {}), dict(env.get("versions") or {}))
        for run_id, env in run_environments.items()
        if int(run_id) in arm_of and (env.get("hardware") or env.get("versions"))
    }
    gpu_hosts = any(hw.get("gpus") for hw, _ in recorded.values())
    per_run = {int(r): _fields(hw, vs, gpu_hosts=gpu_hosts) for r, (hw, vs) in recorded.items()}
    fields = [f for f in (*CPU_FIELDS, *GPU_FIELDS, *DRIVER_FIELDS, *VERSION_FIELDS) if any(f in v for v in per_run.values())]
    mismatches, notes = [], []
    for field in fields:
        by_value: dict[str, list[int]] = {}
        for run_id in sorted(per_run):
            if field in per_run[run_id]:
                by_value.setdefault(per_run[run_id][field], []).append(run_id)
        unrecorded = sorted(r for r in per_run if field not in per_run[r])
        if unrecorded:
            notes.append(f"{field} not recorded by runs {', '.join(map(str, unrecorded))}: not compared there")
        if len(by_value) > 1:
            mismatches.append(_mismatch(field, by_value, arm_of))
    return {"fields": fields, "n_runs_recorded": len(recorded), "mismatches": mismatches, "notes": notes}


def _mismatch(field: str, by_value: Mapping[str, list[int]], arm_of: Mapping[int, str]) -> dict[str, Any]:
    values = []
    parts = []
    for value, run_ids in by_value.items():
        arms = sorted({arm_of[r] for r in run_ids})
        values.append({"value": value, "arms": arms, "run_ids": run_ids})
        who = "; ".join(
            f"{arm} (run{'s' if len(mine) > 1 else ''} {', '.join(map(str, mine))})"
            for arm in arms
            for mine in [[r for r in run_ids if arm_of[r] == arm]]
        )
        parts.append(f"{value!r} on {who}")
    message = (
        f"environment mismatch: {field} differs between runs: {' vs '.join(parts)}; "
        "timings from different machines or software do not compare: rerun every arm on one"
    )
    return {"field": field, "values": values, "message": message}


def environment_notes(section: Mapping[str, Any]) -> list[str]:
    """The comparison's notes from the section: one per mismatch."""
    return [str(m["message"]) for m in section.get("mismatches") or []]
