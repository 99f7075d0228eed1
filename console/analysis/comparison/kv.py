"""What a drafter costs an engine that preallocates its KV cache (vLLM): KV capacity and pressure.

vLLM reserves ``gpu_memory_utilization`` of the device whatever the arm, so the arms' peak
device memory is the same number and says nothing about a drafter. What the drafter takes is
KV-cache capacity (its weights, its own KV cache and activations come out of the same
reservation): fewer tokens fit, so under load more requests wait or are preempted. Each run
stores what ``workers.telemetry.KvSampler`` read from vLLM in ``RunTelemetry.counters["kv"]``
(the selector hands it over in the runs frame's ``spec_counters`` column); this module turns it
into one row per arm x load for the comparison page and the gate's criterion 4.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd


def kv_rows(runs: pd.DataFrame, *, base_arm: str) -> list[dict[str, Any]]:
    """One row per arm x load whose runs recorded KV figures (none for engines that do not):

    ``arm``, ``load``, ``is_baseline``, ``n_runs`` (runs with KV figures), ``kv_cache_tokens``
    (the smallest capacity over the runs, tokens), ``kv_capacity_lost`` (1 - this arm's tokens /
    the baseline's at that load; fraction, None for the baseline or when either is unknown),
    ``kv_usage_peak`` (max over runs) and ``kv_usage_mean`` (mean of the runs' means; fractions
    0-1), ``preemptions`` (mean per run; None unless every run counted them),
    ``preemptions_runs`` (per run, by repeat), ``preemptions_floor`` (the A/A floor: the largest
    difference between two runs of this arm at this load; None with one run), ``running_peak``
    and ``waiting_peak`` (requests, max over runs).
    """
    if "spec_counters" not in runs or runs.empty:
        return []
    kv_runs = []
    for row in runs.sort_values(["arm", "load", "repeat"]).itertuples(index=False):
        counters = row.spec_counters
        kv = counters.get("kv") if isinstance(counters, Mapping) else None
        if isinstance(kv, Mapping) and kv:
            kv_runs.append((str(row.arm), str(row.load), kv))
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for arm, load, kv in kv_runs:
        groups.setdefault((arm, load), []).append(kv)
    out: list[dict[str, Any]] = []
    for (arm, load), kvs in groups.items():
        preempt = [_real(k.get("preemptions")) for k in kvs]
        counted = [p for p in preempt if p is not None]
        usage_means = [v for k in kvs if (v := _real(k.get("kv_usage_mean"))) is not None]
        out.append(
            {
                "arm": arm,
                "load": load,
                "is_baseline": arm == base_arm,
                "n_runs": len(kvs),
                "kv_cache_tokens": _min(k.get("kv_cache_tokens") for k in kvs),
                "kv_capacity_lost": None,
                "kv_usage_peak": _max(k.get("kv_usage_peak") for k in kvs),
                "kv_usage_mean": sum(usage_means) / len(usage_means) if usage_means else None,
                "preemptions": sum(counted) / len(counted) if counted and len(counted) == len(kvs) else None,
                "preemptions_runs": preempt,
                "preemptions_floor": max(counted) - min(counted) if len(counted) >= 2 else None,
                "running_peak": _max(k.get("running_peak") for k in kvs),
                "waiting_peak": _max(k.get("waiting_peak") for k in kvs),
            }
        )
    baseline_tokens = {r["load"]: r["kv_cache_tokens"] for r in out if r["is_baseline"]}
    for r in out:
        base = baseline_tokens.get(r["load"])
        if not r["is_baseline"] and base and r["kv_cache_tokens"] is not None:
            r["kv_capacity_lost"] = 1 - r["kv_cache_tokens"] / base
    return sorted(out, key=lambda r: (not r["is_baseline"], r["arm"], r["load"]))


def _real(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _min(values: Any) -> float | None:
    known = [v for x in values if (v := _real(x)) is not None]
    return min(known) if known else None


def _max(values: Any) -> float | None:
    known = [v for x in values if (v := _real(x)) is not None]
    return max(known) if known else None
