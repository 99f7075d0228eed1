"""The conditions of the fit assessment (docs/fit.md), each judged ``likely``, ``unlikely`` or
``unknown`` with its numbers and the reason, and the generation share of end-to-end latency; the
two about the proposer (does one exist, does it accept enough) are in
:mod:`console.analysis.fit_proposers`. Pure functions over plain data; no Django.
:mod:`console.analysis.fit_assessment` calls them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from console import numbers as fmt

LIKELY, UNLIKELY, UNKNOWN = "likely", "unlikely", "unknown"

# Thresholds (documented in docs/fit.md).
MIN_OUTPUT_TOKENS = 64  # a request "long enough to amortise drafting" produces at least this many
LONG_SHARE = 0.5  # ... and at least this share of requests must be long
QUALITY_BAR = 0.9  # share of gradable baseline requests that must pass
BUSY_UTIL_PCT = 80.0  # mean GPU utilisation at or above this: compute-saturated
KV_FULL = 0.9  # KV-cache usage (fraction) at or above this: the cache is full
MAX_INFLIGHT = 16.0  # mean in-flight requests above this: not medium-to-low concurrency
INTERACTIVE_SHARE = 0.5  # share of interactive requests for the traffic to count as interactive
GENERATION_SHARE_WARN = 0.5  # median generation share under this: speculation cannot move e2e much

CONDITIONS = (
    ("quality_bar", "The target already meets its quality bar"),
    ("output_length", "Outputs are long enough to amortise drafting"),
    ("serving_headroom", "Serving is memory-bound or under-used at the promised load"),
    ("interactive_traffic", "Traffic is interactive at medium-to-low concurrency"),
    ("proposer", "A compatible proposer exists for this engine and target"),
    ("drafter_acceptance", "The drafter's acceptance is high enough to pay for its cost"),
)
TITLES = dict(CONDITIONS)


def _quantile(values: Sequence[float], q: float) -> float | None:
    return float(np.quantile(np.asarray(values, dtype=float), q)) if len(values) else None


def _condition(name: str, verdict: str, numbers: dict[str, Any], reason: str) -> dict[str, Any]:
    return {"name": name, "title": TITLES[name], "verdict": verdict, "numbers": numbers, "reason": reason}


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _pct(x: float) -> str:
    """A share (fraction) as a percentage, through the formatting layer."""
    return fmt.rate(x)


def quality_condition(runs: list[dict]) -> dict[str, Any]:
    if not runs:
        return _condition(
            "quality_bar",
            UNKNOWN,
            {"bar": QUALITY_BAR},
            "the baseline has not run yet: quality is graded on its outputs",
        )
    checks = {name: [0, 0] for name in ("json_schema", "tool_call", "reference_answer")}
    for r in runs:
        for name, (n, ok) in (r.get("quality") or {}).items():
            if name in checks:
                checks[name][0] += int(n)
                checks[name][1] += int(ok)
    gradable = sum(n for n, _ in checks.values())
    passed = sum(ok for _, ok in checks.values())
    numbers: dict[str, Any] = {
        "gradable": gradable,
        "passed": passed,
        "pass_rate": passed / gradable if gradable else None,
        "bar": QUALITY_BAR,
        "by_check": {k: {"gradable": n, "passed": ok} for k, (n, ok) in checks.items() if n},
    }
    if not gradable:
        return _condition(
            "quality_bar",
            UNKNOWN,
            numbers,
            "nothing is gradable: no request has a JSON response format, tools or a reference answer in its metadata",
        )
    rate = passed / gradable
    verdict = LIKELY if rate >= QUALITY_BAR else UNLIKELY
    reason = (
        f"the baseline passed {passed} of {gradable} gradable outputs ({_pct(rate)}; bar {_pct(QUALITY_BAR)})"
    )
    if verdict == UNLIKELY:
        reason += ": fix the model choice first, speculation only makes it faster"
    return _condition("quality_bar", verdict, numbers, reason)


def output_length_condition(trace: Mapping[str, Any], runs: list[dict]) -> dict[str, Any]:
    measured = [t for r in runs for t in r.get("output_tokens") or []]
    if measured:
        lengths, source = measured, "baseline outputs"
    else:
        recorded = trace.get("recorded_output_tokens") or []
        limits = trace.get("output_limits") or []
        n_recorded = sum(v is not None for v in recorded)
        lengths = [rec if rec is not None else lim for rec, lim in zip(recorded, limits, strict=True)]
        if n_recorded == len(lengths):
            source = "recorded output lengths"
        elif n_recorded == 0:
            source = "output limits"
        else:
            source = f"recorded output lengths ({n_recorded} of {len(lengths)}), output limits for the rest"
    numbers: dict[str, Any] = {"source": source, "n": len(lengths), "min_tokens": MIN_OUTPUT_TOKENS}
    if not lengths:
        return _condition("output_length", UNKNOWN, numbers, "no requests to measure")
    share = sum(v >= MIN_OUTPUT_TOKENS for v in lengths) / len(lengths)
    numbers |= {
        "share_at_least_min": share,
        "median_tokens": _quantile(lengths, 0.5),
        "p90_tokens": _quantile(lengths, 0.9),
    }
    verdict = LIKELY if share >= LONG_SHARE else UNLIKELY
    reason = f"{_pct(share)} of requests have at least {MIN_OUTPUT_TOKENS} output tokens (by {source}; needs {_pct(LONG_SHARE)})"
    if source == "output limits" and verdict == LIKELY:
        reason += "; limits are upper bounds, the baseline's real outputs may be shorter"
    return _condition("output_length", verdict, numbers, reason)


def heaviest_load(levels: list[dict]) -> str | None:
    if not levels:
        return None
    top = max(
        levels,
        key=lambda lv: (float(lv.get("rate_multiplier") or 1.0), -(lv.get("concurrency") or math.inf)),
    )
    return top.get("label")


def _by_load(runs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in runs:
        out.setdefault(str(r.get("load")), []).append(r)
    return out


def serving_condition(engine: str, runs: list[dict], heaviest: str | None) -> dict[str, Any]:
    if not runs:
        return _condition(
            "serving_headroom",
            UNKNOWN,
            {"busy_util_pct": BUSY_UTIL_PCT},
            "the baseline has not run yet: utilisation and KV usage come from its telemetry",
        )
    loads: list[dict[str, Any]] = []
    for load, group in _by_load(runs).items():
        loads.append(
            {
                "load": load,
                "gpu_util_pct": _mean(r.get("gpu_util_pct") for r in group),
                "gpu_memory_used": _mean(
                    (r["gpu_peak_memory_bytes"] / r["gpu_memory_bytes"])
                    if r.get("gpu_peak_memory_bytes") and r.get("gpu_memory_bytes")
                    else None
                    for r in group
                ),
                "kv_cache_usage": _mean(r.get("kv_cache_usage") for r in group),
                "preemptions": _mean(r.get("preemptions") for r in group),
            }
        )
    numbers: dict[str, Any] = {
        "busy_util_pct": BUSY_UTIL_PCT,
        "kv_full": KV_FULL,
        "judged_at": heaviest,
        "loads": loads,
    }
    row = next((lv for lv in loads if lv["load"] == heaviest), loads[-1])
    numbers["judged_at"] = row["load"]
    util = row["gpu_util_pct"]
    if util is None:
        why = (
            "the baseline ran on CPU (no GPU telemetry): GPU utilisation and KV usage are not measured there"
            if engine != "openai"
            else "the serving GPU is behind the server: this host's NVML cannot see it, and the server reported no utilisation"
        )
        return _condition("serving_headroom", UNKNOWN, numbers, why)
    kv = row["kv_cache_usage"]
    kv_full = (kv is not None and kv >= KV_FULL) or bool(row["preemptions"])
    if util >= BUSY_UTIL_PCT:
        verdict, reason = (
            UNLIKELY,
            f"mean GPU utilisation {_pct(util / 100)} at {row['load']} (>= {_pct(BUSY_UTIL_PCT / 100)}): compute-saturated, a proposer adds work",
        )
    else:
        verdict, reason = (
            LIKELY,
            f"mean GPU utilisation {_pct(util / 100)} at {row['load']} (< {_pct(BUSY_UTIL_PCT / 100)}): headroom for verification",
        )
    if kv_full:
        reason += "; the KV cache is full (usage or preemptions): a draft's memory competes with it"
        verdict = UNLIKELY
    return _condition("serving_headroom", verdict, numbers, reason)


def traffic_condition(
    trace: Mapping[str, Any], levels: list[dict], runs: list[dict], heaviest: str | None
) -> dict[str, Any]:
    classes = dict(trace.get("classes") or {})
    total = sum(classes.values())
    interactive = classes.get("interactive", 0) / total if total else None
    base_rate = trace.get("rate_rps")
    measured = _by_load(runs)
    loads: list[dict[str, Any]] = []
    for lv in levels:
        label = str(lv.get("label"))
        group = measured.get(label) or []
        loads.append(
            {
                "load": label,
                "offered_rps": (base_rate * float(lv.get("rate_multiplier") or 1.0)) if base_rate else None,
                "concurrency_cap": lv.get("concurrency"),
                "measured_offered_rps": _mean(r.get("offered_rps") for r in group),
                "inflight_mean": _mean(r.get("inflight_mean") for r in group),
                "inflight_max": max(
                    (r["inflight_max"] for r in group if r.get("inflight_max") is not None), default=None
                ),
            }
        )
    numbers: dict[str, Any] = {
        "classes": classes,
        "interactive_share": interactive,
        "max_inflight": MAX_INFLIGHT,
        "judged_at": heaviest,
        "loads": loads,
    }
    if interactive is None:
        return _condition("interactive_traffic", UNKNOWN, numbers, "the trace has no requests")
    if interactive < INTERACTIVE_SHARE:
        return _condition(
            "interactive_traffic",
            UNLIKELY,
            numbers,
            f"only {_pct(interactive)} of requests are interactive: batch serving is not speculation's documented fit",
        )
    row = next((lv for lv in loads if lv["load"] == heaviest), None)
    if row is None or row["inflight_mean"] is None:
        return _condition(
            "interactive_traffic",
            LIKELY,
            numbers,
            f"{_pct(interactive)} of requests are interactive; in-flight concurrency is measured when the baseline runs",
        )
    if row["inflight_mean"] > MAX_INFLIGHT:
        return _condition(
            "interactive_traffic",
            UNLIKELY,
            numbers,
            f"{fmt.number(row['inflight_mean'])} requests in flight on average at {row['load']} (> {MAX_INFLIGHT:.0f}): high concurrency",
        )
    return _condition(
        "interactive_traffic",
        LIKELY,
        numbers,
        f"{_pct(interactive)} interactive, {fmt.number(row['inflight_mean'])} requests in flight on average at {row['load']} (<= {MAX_INFLIGHT:.0f})",
    )


def generation_share(runs: list[dict]) -> list[dict[str, Any]]:
    """Per traffic class, pooled over the baseline's runs: the median and p95 of
    (e2e - TTFT) / e2e (fractions; e2e includes metadata external time), and whether to warn."""
    pooled: dict[str, list[float]] = {}
    by_load: dict[str, dict[str, list[float]]] = {}
    external = any(r.get("external_time") for r in runs)
    for r in runs:
        for cls, values in (r.get("generation_share") or {}).items():
            pooled.setdefault(cls, []).extend(values)
            by_load.setdefault(cls, {}).setdefault(str(r.get("load")), []).extend(values)
    out = []
    for cls in sorted(pooled):
        values = pooled[cls]
        median = _quantile(values, 0.5)
        warn = median is not None and median < GENERATION_SHARE_WARN
        out.append(
            {
                "traffic_class": cls,
                "n": len(values),
                "median": median,
                "p95": _quantile(values, 0.95),
                "includes_external_time": external,
                "by_load": [
                    {"load": load, "n": len(v), "median": _quantile(v, 0.5), "p95": _quantile(v, 0.95)}
                    for load, v in by_load[cls].items()
                ],
                "warning": (
                    f"generation is {_pct(median or 0)} of end-to-end latency for {cls} (median): "
                    "speculation cannot move end-to-end latency much for this class"
                )
                if warn
                else None,
            }
        )
    return out
