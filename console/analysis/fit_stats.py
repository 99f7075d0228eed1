"""The fit assessment's run facts: what :func:`run_fit_stats` reduces a finished baseline run's
stored results to (cached in ``RunSummary.data["fit"]`` by the worker, so a page GET only pools
small lists), and the trace metadata readers it shares with the selectors. Seconds, tokens.
Pure functions over plain data; no Django. The assessment itself is
:mod:`console.analysis.fit_assessment`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from console.analysis.grading import grade_math

FIT_VERSION = 1
# metadata keys whose numbers (seconds) are time spent outside the model: summed into e2e.
EXTERNAL_KEYS = ("external_s", "retrieval_s", "tool_s")
# metadata keys holding a recorded output length (tokens), in order of preference.
RECORDED_OUTPUT_KEYS = (("paired", "trace_output_tokens"), ("output_tokens",), ("output_length",))


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


PER_REQUEST_SOURCE = "per-request"  # the comparison's speculation source for per-step records


def candidate_fit_stats(
    *,
    headline: Sequence[Mapping[str, Any]],
    speculation: Sequence[Mapping[str, Any]],
    configs: Mapping[str, Mapping[str, Any] | None],
    baseline_arm: str | None,
) -> list[dict[str, Any]]:
    """What the stored comparison says about each speculative candidate's drafter, per load (one
    row with ``load`` None for a candidate that has not run): its config (``method``,
    ``k_configured``, ``draft_model``), ``drafts`` and ``drafted`` (tokens), ``acceptance_rate``
    (accepted / drafted), ``tokens_per_pass`` (output tokens per target pass, from per-request
    records; else the server's mean acceptance length, tokens per drafting pass) and its
    ``tokens_per_pass_source``, and the mean TPOT of the candidate and of the baseline at that
    load (``tpot_s``, ``baseline_tpot_s``, seconds per token).

    ``headline`` and ``speculation``: the comparison's rows as stored (empty before it exists);
    ``configs``: each candidate arm's speculative config, in arm order (an A/A arm's None is
    skipped: nothing drafts)."""
    base_tpot = {h.get("load"): h.get("tpot_s_mean") for h in headline if h.get("arm") == baseline_arm}
    evidence = {(s.get("arm"), s.get("load")): s for s in speculation}
    out: list[dict[str, Any]] = []
    for arm, config in configs.items():
        if not config:
            continue
        k = config.get("num_speculative_tokens")
        known = {
            "arm": arm,
            "method": config.get("method"),
            "k_configured": k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None,
            "draft_model": config.get("model"),
        }
        rows = [h for h in headline if h.get("arm") == arm]
        if not rows:
            out.append(known | {"load": None})
        for h in rows:
            s = evidence.get((arm, h.get("load"))) or {}
            per_request = s.get("source") == PER_REQUEST_SOURCE and h.get("tokens_per_pass") is not None
            tpp = h.get("tokens_per_pass") if per_request else s.get("mean_acceptance_length")
            out.append(
                known
                | {
                    "load": h.get("load"),
                    "drafts": s.get("drafts"),
                    "drafted": s.get("drafted"),
                    "acceptance_rate": s.get("acceptance_rate"),
                    "tokens_per_pass": tpp,
                    "tokens_per_pass_source": (PER_REQUEST_SOURCE if per_request else s.get("source"))
                    if tpp
                    else None,
                    "tpot_s": h.get("tpot_s_mean"),
                    "baseline_tpot_s": base_tpot.get(h.get("load")),
                }
            )
    return out
