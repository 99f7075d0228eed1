"""The rollback plan a draft starts with: triggers read off the evidence, and the default steps.

Each default trigger carries a PromQL query on vLLM's own metric names (``docs/rollouts.md``
lists them; a fleet behind another server edits the queries), so a guarded rollout can evaluate
it against the fleet's Prometheus and the Argo Rollouts and Flagger exports can carry it. What a
trigger is, and its checks, are in ``decisions.triggers``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from console.decisions.triggers import trigger_full

DEFAULT_ROLLBACK_STEPS = (
    "1. Switch the serving config back to the baseline (revert config below).\n"
    "2. Roll the serving fleet.\n3. Watch the triggers' metrics for one window."
)

# Each look covers WINDOW_MIN minutes; a breach needs MIN_SAMPLES looks with data first.
WINDOW_MIN = 2
MIN_SAMPLES = 5


def _p95(histogram: str) -> str:
    return f"histogram_quantile(0.95, sum by (le) (rate({histogram}_bucket{{$pool}}[$window])))"


def _share(part: str, whole: str) -> str:
    return f"sum(rate({part}[$window])) / sum(rate({whole}[$window]))"


QUERIES = {
    "tpot_s": _p95("vllm:time_per_output_token_seconds"),
    "e2e_s": _p95("vllm:e2e_request_latency_seconds"),
    "acceptance": _share(
        "vllm:spec_decode_num_accepted_tokens_total{$pool}", "vllm:spec_decode_num_draft_tokens_total{$pool}"
    ),
    "preemptions": "sum(rate(vllm:num_preemptions_total{$pool}[$window]))",
    "kv_usage": "avg(avg_over_time(vllm:kv_cache_usage_perc{$pool}[$window]))",
    "aborted": _share(
        'vllm:request_success_total{finished_reason="abort",$pool}', "vllm:request_success_total{$pool}"
    ),
    # vLLM counts no invalid outputs: the gateway or validator in front of it exports these.
    "invalid_structured": _share(
        "specreview_structured_outputs_invalid_total{$pool}", "specreview_structured_outputs_total{$pool}"
    ),
}
WORDS = {"tpot_s": "p95 TPOT", "e2e_s": "p95 end-to-end latency"}


def _latency_trigger(facts: Mapping[str, Any], *, metric: str, traffic_class: str) -> dict[str, Any] | None:
    """The candidate pool's p95 worse than the control's by more than the A/A noise floor (the
    largest floor over the loads of the promised class; 10% of the baseline's p95 when no floor
    was measured, and the name says so)."""
    rows = [
        r
        for r in facts.get("comparisons") or []
        if r.get("metric") == metric and r.get("stat") == "p95" and r.get("traffic_class") == traffic_class
    ]
    floors = [float(r["noise_floor"]) for r in rows if isinstance(r.get("noise_floor"), int | float)]
    bases = [float(r["base"]) for r in rows if isinstance(r.get("base"), int | float)]
    if floors:
        threshold, basis = max(floors), "beyond the A/A noise floor"
    elif bases:
        threshold, basis = 0.1 * max(bases), "by 10% of the baseline's (no A/A floor measured)"
    else:
        return None
    return {
        "metric": f"{WORDS[metric]} ({traffic_class}) above the control's {basis}",
        "op": ">",
        "threshold": round(threshold, 6),
        "unit": "s",
        "compare": "control",
        "query": QUERIES[metric],
    }


def _acceptance_trigger(facts: Mapping[str, Any]) -> dict[str, Any] | None:
    """Acceptance below the lowest lower bound of the candidate's 95% intervals over its loads;
    where no interval was measured (too few drafting requests, or a comparison from before
    intervals), below 80% of the lowest rate measured; None without either. Rounded down, so
    the threshold never sits above the bound."""
    bound, rate = facts.get("acceptance_rate_lo_min"), facts.get("acceptance_rate_min")
    if isinstance(bound, int | float) and bound > 0:
        metric, threshold = "acceptance rate (below the evaluated interval's lower bound)", float(bound)
    elif isinstance(rate, int | float) and rate > 0:
        metric, threshold = "acceptance rate (80% of the lowest measured; no interval)", 0.8 * float(rate)
    else:
        return None
    return {
        "metric": metric,
        "op": "<",
        "threshold": math.floor(threshold * 1000) / 1000,
        "unit": "fraction",
        "compare": "absolute",
        "query": QUERIES["acceptance"],
    }


def default_rollback_triggers(*, facts: Mapping[str, Any], traffic_class: str) -> list[dict[str, Any]]:
    """Triggers pre-filled from evidence, each a look every ``WINDOW_MIN`` minutes and
    ``MIN_SAMPLES`` looks before a breach: the promised class's p95 TPOT and end-to-end latency
    above the control's beyond the A/A noise floor (seconds); the acceptance rate under the
    lowest lower bound of its evaluated 95% intervals (fraction; 80% of the lowest rate where no
    interval was measured); preemptions above the control's (per second);
    KV-cache usage 10 points above the control's (fraction); the aborted share 1 point above the
    control's (fraction, rolls back); invalid structured outputs above the control's share."""
    triggers: list[dict[str, Any]] = []
    for metric in ("tpot_s", "e2e_s"):
        trigger = _latency_trigger(facts, metric=metric, traffic_class=traffic_class)
        if trigger:
            triggers.append(trigger)
    acceptance = _acceptance_trigger(facts)
    if acceptance:
        triggers.append(acceptance)
    triggers += [
        {
            "metric": "preemptions above the control's",
            "op": ">",
            "threshold": 0,
            "unit": "per s",
            "compare": "control",
            "query": QUERIES["preemptions"],
        },
        {
            "metric": "KV-cache usage 10 points above the control's",
            "op": ">",
            "threshold": 0.1,
            "unit": "fraction",
            "compare": "control",
            "query": QUERIES["kv_usage"],
        },
        {
            "metric": "aborted requests 1 point above the control's share",
            "op": ">",
            "threshold": 0.01,
            "unit": "fraction",
            "compare": "control",
            "query": QUERIES["aborted"],
            "action": "rollback",
        },
        {
            "metric": "invalid structured outputs above the control's share",
            "op": ">",
            "threshold": 0,
            "unit": "fraction",
            "compare": "control",
            "query": QUERIES["invalid_structured"],
        },
    ]
    return [trigger_full({"window_min": WINDOW_MIN, "min_samples": MIN_SAMPLES} | t) for t in triggers]
