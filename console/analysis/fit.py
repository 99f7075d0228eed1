"""Fit assessment: does this workload look like one where speculative decoding can pay off?

The five conditions of docs/fit.md (after the background text's "when speculative decoding is
worth evaluating"), each judged ``likely``, ``unlikely`` or ``unknown`` with its numbers and the
reason, plus the generation share of end-to-end latency per traffic class.

Two inputs: what is known before any run (the trace's requests, the experiment's configs and
load levels) and, once a baseline run finished, the per-run facts :func:`run_fit_stats` reduces
its stored results to (cached in ``RunSummary.data["fit"]`` by the worker, so a page GET only
pools small lists). Pure functions over plain data; no Django.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from console.analysis.grading import grade_math

FIT_VERSION = 1
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
# metadata keys whose numbers (seconds) are time spent outside the model: summed into e2e.
EXTERNAL_KEYS = ("external_s", "retrieval_s", "tool_s")
# metadata keys holding a recorded output length (tokens), in order of preference.
RECORDED_OUTPUT_KEYS = (("paired", "trace_output_tokens"), ("output_tokens",), ("output_length",))
HEAD_METHODS = {"eagle", "eagle3", "mtp", "medusa"}

CONDITIONS = (
    ("quality_bar", "The target already meets its quality bar"),
    ("output_length", "Outputs are long enough to amortise drafting"),
    ("serving_headroom", "Serving is memory-bound or under-used at the promised load"),
    ("interactive_traffic", "Traffic is interactive at medium-to-low concurrency"),
    ("proposer", "A compatible proposer exists for this engine and target"),
)
TITLES = dict(CONDITIONS)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def external_seconds(metadata: Mapping[str, Any] | None) -> float:
    """Seconds a request spent outside the model, from its trace metadata (``EXTERNAL_KEYS``
    summed; anything not a finite number >= 0 is ignored)."""
    if not isinstance(metadata, Mapping):
        return 0.0
    values = (_number(metadata.get(k)) for k in EXTERNAL_KEYS)
    return sum(v for v in values if v is not None and v >= 0)


def first_token_count(values: Iterable[Any]) -> int | None:
    """The first of ``values`` that is a whole number >= 0 (a token count), or None."""
    for value in values:
        number = _number(value)
        if number is not None and number >= 0 and number == int(number):
            return int(number)
    return None


def recorded_output_tokens(metadata: Mapping[str, Any] | None) -> int | None:
    """The output length (tokens) the trace recorded for a request (``RECORDED_OUTPUT_KEYS``,
    in that order), or None."""

    def walk(path: tuple[str, ...]) -> Any:
        value: Any = metadata
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        return value

    return first_token_count(walk(p) for p in RECORDED_OUTPUT_KEYS)


def answer_correct(text: str | None, reference: Any) -> bool | None:
    """Whether the answer's final number equals the numeric ``reference`` answer (GSM8K's
    ``metadata.reference_answer``), by the comparison's own math grading
    (``console.analysis.grading.grade_math``); None when the reference is not a number (not gradable)."""
    if isinstance(reference, bool) or not isinstance(reference, str | int | float):
        return None
    return grade_math(text, str(reference))[0]


def inflight(sent: Sequence[float], finish: Sequence[float]) -> tuple[float | None, int | None]:
    """Mean and maximum requests in flight (sent, not finished) over the run's busy span:
    mean = total in-flight seconds / (last finish - first send)."""
    pairs = [
        (s, f) for s, f in zip(sent, finish, strict=True) if _number(s) is not None and _number(f) is not None
    ]
    if not pairs:
        return None, None
    start, end = min(s for s, _ in pairs), max(f for _, f in pairs)
    busy = sum(max(f - s, 0.0) for s, f in pairs)
    events = sorted([(s, 1) for s, _ in pairs] + [(f, -1) for _, f in pairs], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    mean = busy / (end - start) if end > start else float(len(pairs))
    return mean, peak


def _quantile(values: Sequence[float], q: float) -> float | None:
    return float(np.quantile(np.asarray(values, dtype=float), q)) if len(values) else None


def run_fit_stats(
    derived: pd.DataFrame,
    *,
    metadata: Mapping[str, Mapping[str, Any]],
    telemetry: Mapping[str, Any] | None,
    hardware: Mapping[str, Any] | None,
    run: Mapping[str, Any],
) -> dict[str, Any]:
    """What one finished baseline run says about fit, small enough to cache per run.

    ``derived``: the run's requests after ``metrics.requests_derive`` (``completed``,
    ``ttft_s``, ``e2e_s``, ``sent_s``, ``finish_s``, ``num_output_tokens``, ``traffic_class``,
    the stored validity flags, ``output_text``); ``metadata``: the trace metadata by request id;
    ``telemetry``: the RunTelemetry fields; ``run``: load label, rate multiplier, cap, repeat.
    Shares are fractions 0..1, rates requests/s, lengths tokens.
    """
    done = derived[derived["completed"]]
    shares: dict[str, list[float]] = {}
    any_external = False
    for row in done.itertuples(index=False):
        ext = external_seconds(metadata.get(row.request_id))
        any_external = any_external or ext > 0
        e2e = float(row.e2e_s) + ext
        ttft = float(row.ttft_s)
        if not (math.isfinite(e2e) and math.isfinite(ttft)) or e2e <= 0:
            continue
        share = min(max((float(row.e2e_s) - ttft) / e2e, 0.0), 1.0)
        shares.setdefault(str(row.traffic_class), []).append(round(share, 4))
    # Quality: the stored validity flags where a check applies, and reference answers.
    checks = {"json_schema": [0, 0], "tool_call": [0, 0], "reference_answer": [0, 0]}
    for row in derived.itertuples(index=False):
        failed = not row.completed
        for name, columns in (
            ("json_schema", ("json_valid", "schema_valid")),
            ("tool_call", ("tool_call_valid",)),
        ):
            flags = [getattr(row, c, None) for c in columns]
            flags = [f for f in flags if f is not None and not pd.isna(f)]
            if flags:
                checks[name][0] += 1
                checks[name][1] += int(not failed and all(bool(f) for f in flags))
        reference = (metadata.get(row.request_id) or {}).get("reference_answer")
        verdict = (
            answer_correct(None if failed else row.output_text, reference) if reference is not None else None
        )
        if verdict is not None:
            checks["reference_answer"][0] += 1
            checks["reference_answer"][1] += int(verdict)
    scheduled = derived["scheduled_s"].dropna().to_numpy(dtype=float)
    offered = (
        (len(scheduled) - 1) / float(np.ptp(scheduled))
        if len(scheduled) > 1 and np.ptp(scheduled) > 0
        else None
    )
    mean_inflight, max_inflight = inflight(done["sent_s"].to_list(), done["finish_s"].to_list())
    tele = telemetry or {}
    counters = tele.get("counters") or {}
    gpus = (hardware or {}).get("gpus") or []
    return {
        "version": FIT_VERSION,
        "load": run.get("load"),
        "rate_multiplier": run.get("rate_multiplier"),
        "concurrency_cap": run.get("concurrency_cap"),
        "repeat": run.get("repeat"),
        "n_requests": int(len(derived)),
        "n_completed": int(len(done)),
        "output_tokens": [int(v) for v in done["num_output_tokens"].fillna(0)],
        "generation_share": shares,
        "external_time": any_external,
        "offered_rps": offered,
        "inflight_mean": mean_inflight,
        "inflight_max": max_inflight,
        "quality": checks,
        "gpu_count": len(gpus),
        "gpu_util_pct": _number(tele.get("mean_util")),
        "gpu_peak_memory_bytes": _number(tele.get("gpu_peak_memory_bytes")),
        "gpu_memory_bytes": sum(int(g.get("memory_bytes") or 0) for g in gpus) or None,
        "kv_cache_usage": _number(counters.get("kv_cache_usage_perc")),
        "preemptions": _number(counters.get("num_preemptions")),
    }


# -- the assessment ---------------------------------------------------------------------------


def _condition(name: str, verdict: str, numbers: dict[str, Any], reason: str) -> dict[str, Any]:
    return {"name": name, "title": TITLES[name], "verdict": verdict, "numbers": numbers, "reason": reason}


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _quality(runs: list[dict]) -> dict[str, Any]:
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
            "nothing is gradable: no request has a response_format, tools or a metadata.reference_answer",
        )
    rate = passed / gradable
    verdict = LIKELY if rate >= QUALITY_BAR else UNLIKELY
    reason = (
        f"the baseline passed {passed} of {gradable} gradable outputs ({_pct(rate)}; bar {_pct(QUALITY_BAR)})"
    )
    if verdict == UNLIKELY:
        reason += ": fix the model choice first, speculation only makes it faster"
    return _condition("quality_bar", verdict, numbers, reason)


def _output_length(trace: Mapping[str, Any], runs: list[dict]) -> dict[str, Any]:
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


def _heaviest(levels: list[dict]) -> str | None:
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


def _serving(engine: str, runs: list[dict], heaviest: str | None) -> dict[str, Any]:
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
            f"mean GPU utilisation {util:.0f}% at {row['load']} (>= {BUSY_UTIL_PCT:.0f}%): compute-saturated, a proposer adds work",
        )
    else:
        verdict, reason = (
            LIKELY,
            f"mean GPU utilisation {util:.0f}% at {row['load']} (< {BUSY_UTIL_PCT:.0f}%): headroom for verification",
        )
    if kv_full:
        reason += "; the KV cache is full (usage or preemptions): a draft's memory competes with it"
        verdict = UNLIKELY
    return _condition("serving_headroom", verdict, numbers, reason)


def _traffic(
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
            f"{row['inflight_mean']:.1f} requests in flight on average at {row['load']} (> {MAX_INFLIGHT:.0f}): high concurrency",
        )
    return _condition(
        "interactive_traffic",
        LIKELY,
        numbers,
        f"{_pct(interactive)} interactive, {row['inflight_mean']:.1f} requests in flight on average at {row['load']} (<= {MAX_INFLIGHT:.0f})",
    )


def _proposer(
    engine: str, target: str, specs: list[dict], catalog: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    family = (catalog.get(target) or {}).get("family")
    configured_methods = {str(s.get("method")) for s in specs}
    proposers: list[dict[str, Any]] = [
        {
            "proposer": "ngram",
            "kind": "n-gram (prompt lookup)",
            "source": "always available",
            "configured": "ngram" in configured_methods,
            "note": "needs no model; pays off where outputs copy the prompt",
        }
    ]
    same = unknown = False
    drafts = {s.get("model") for s in specs if s.get("method") == "draft_model" and s.get("model")}
    if engine == "hf" and family:
        for name, entry in catalog.items():
            if name != target and entry.get("family") == family and name not in drafts:
                smaller = (entry.get("size_bytes") or 0) < (
                    (catalog.get(target) or {}).get("size_bytes") or 0
                )
                if smaller:
                    same = True
                    proposers.append(
                        {
                            "proposer": name,
                            "kind": "draft model (same tokenizer)",
                            "source": "model catalog",
                            "configured": False,
                            "note": "",
                        }
                    )
    for model in sorted(str(m) for m in drafts):
        draft_family = (catalog.get(model) or {}).get("family")
        if family and draft_family:
            if draft_family == family:
                same = True
                kind, note = "draft model (same tokenizer)", ""
            else:
                kind = "draft model (cross-vocabulary)"
                note = (
                    "greedy-only on the hf engine (universal assisted generation)"
                    if engine == "hf"
                    else "needs the engine's heterogeneous-vocabulary support"
                )
        else:
            unknown = True
            kind, note = "draft model", "tokenizer not known to the catalog: check it matches the target's"
        proposers.append(
            {"proposer": model, "kind": kind, "source": "configured", "configured": True, "note": note}
        )
    for method in sorted(configured_methods & HEAD_METHODS):
        same = True
        proposers.append(
            {
                "proposer": method,
                "kind": f"{method.upper()} head",
                "source": "configured",
                "configured": True,
                "note": "trained for the target",
            }
        )
    numbers = {"engine": engine, "target": target, "tokenizer_family": family, "proposers": proposers}
    if same:
        names = ", ".join(
            p["proposer"] for p in proposers[1:] if "cross" not in p["kind"] and p["kind"] != "draft model"
        )
        return _condition("proposer", LIKELY, numbers, f"same-tokenizer proposer(s): {names}; n-gram always")
    if family is None or unknown:
        return _condition(
            "proposer",
            UNKNOWN,
            numbers,
            f"the model catalog does not know the tokenizer of {target!r}, so no same-tokenizer draft can be named; "
            "n-gram remains available",
        )
    return _condition(
        "proposer",
        UNLIKELY,
        numbers,
        "no same-tokenizer draft or EAGLE/MTP head: only n-gram (and cross-vocabulary drafts, with their constraints)",
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


def fit_assess(
    *,
    trace: Mapping[str, Any],
    engine: str,
    target_model: str,
    specs: list[dict],
    load_levels: list[dict],
    runs: list[dict],
    catalog: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """The assessment: ``conditions`` (one per :data:`CONDITIONS`, each ``name``, ``title``,
    ``verdict``, ``numbers``, ``reason``), ``generation_share`` (per class), ``stage``
    ("before any run" or "after N baseline run(s)").

    ``trace``: ``classes`` ({class: count}), ``rate_rps`` (the trace's own mean arrival rate),
    ``output_limits`` and ``recorded_output_tokens`` (one per request, tokens or None);
    ``specs``: the candidates' speculative configs; ``runs``: :func:`run_fit_stats` of the
    finished baseline runs; ``catalog``: {model name: {"family", "size_bytes"}}.
    """
    heaviest = _heaviest(load_levels)
    return {
        "version": FIT_VERSION,
        "stage": f"after {len(runs)} baseline run(s)" if runs else "before any run",
        "conditions": [
            _quality(runs),
            _output_length(trace, runs),
            _serving(engine, runs, heaviest),
            _traffic(trace, load_levels, runs, heaviest),
            _proposer(engine, target_model, specs, catalog),
        ],
        "generation_share": generation_share(runs),
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items()) or "—"
    return str(value)


def numbers_lines(name: str, numbers: Mapping[str, Any]) -> list[str]:
    """A condition's numbers as short lines for the page (the API returns them as they are)."""
    if name == "proposer":
        lines = []
        for p in numbers.get("proposers") or []:
            extra = ", configured" if p.get("configured") else ""
            note = f"; {p['note']}" if p.get("note") else ""
            lines.append(f"{p['proposer']}: {p['kind']} ({p['source']}{extra}{note})")
        return lines
    lines = [f"{k}: {_fmt(v)}" for k, v in numbers.items() if k != "loads"]
    for row in numbers.get("loads") or []:
        lines.append(" · ".join(f"{k} {_fmt(v)}" for k, v in row.items()))
    return lines
