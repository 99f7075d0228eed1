"""SGLang's ``/metrics`` read as plain data: its KV-cache and scheduler gauges, and its spec-decode
gauges summarised over the samples a run took.

Names are SGLang's own, from ``python/sglang/srt/metrics/collector.py`` (``SchedulerMetricsCollector``,
sgl-project/sglang at commit 00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538), and what they mean from
``python/sglang/srt/managers/scheduler_metrics_mixin.py`` (``log_decode_stats``, commit
01bb3c807f7e62c19a31de7548837505488c2b64):

- ``sglang:spec_accept_length`` is a gauge over the last decode logging interval
  (``--decode-log-interval`` batches, 40 by default): accepted draft tokens plus one bonus token
  per verification, divided by the verifications: ``1 + accepted / drafts``, vLLM's mean
  acceptance length. It is set to 0 when the server runs no speculative algorithm, and is >= 1
  otherwise. It keeps its last value between intervals and while idle.
- ``sglang:spec_accept_rate`` divides ``accepted + bonus`` by ``verifications x
  speculative_num_draft_tokens``: not vLLM's acceptance rate (accepted / drafted), so it is
  recorded but never shown as one.
- There is no spec-decode counter in SGLang's ``/metrics``: nothing counts drafts or draft tokens,
  so a run's acceptance comes from gauges sampled through the run, labelled ``"sampled gauge"``.
  The only cumulative figure, ``avg_spec_accept_length`` (``/get_server_info``'s
  ``internal_states``, cumulative since server start), is not read.

Gauges carry ``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank`` and, with data parallelism,
``dp_rank`` labels. Every scheduler of one data-parallel rank reports the same batch, so a figure
is read once per ``dp_rank`` (the maximum over its series) and then summed (counts) or averaged
(fractions) over the ranks.
"""

from __future__ import annotations

from typing import Any

SAMPLED_GAUGE = "sampled gauge"

# name -> (key, how ranks combine). Fractions average over dp ranks; counts and capacities sum.
KV_GAUGES = {
    "sglang:token_usage": ("kv_cache_usage_perc", "mean"),  # used KV tokens / pool size, 0-1
    "sglang:num_running_reqs": ("num_requests_running", "sum"),
    "sglang:num_queue_reqs": ("num_requests_waiting", "sum"),
    "sglang:max_total_num_tokens": ("kv_cache_tokens", "sum"),  # the KV pool's size in tokens
    # A retraction is SGLang's preemption: a running request evicted to free KV space.
    "sglang:num_retracted_requests_total": ("num_preemptions", "sum"),
}
SPEC_GAUGES = {
    "sglang:spec_accept_length": ("spec_accept_length", "mean"),
    "sglang:spec_accept_rate": ("spec_accept_rate", "mean"),
    # Set only by decode logs: > 0 says a decode interval was logged, so the spec gauges above
    # hold a decode's figures rather than their start-up 0.
    "sglang:gen_throughput": ("gen_throughput", "mean"),
}
COUNT_KEYS = frozenset({"num_requests_running", "num_requests_waiting", "kv_cache_tokens", "num_preemptions"})


def sglang_kv_state(*, samples: list[tuple[str, dict[str, str], float]]) -> dict[str, Any]:
    """KV-cache state and spec-decode gauges from SGLang's samples: ``kv_cache_usage_perc``
    (fraction 0-1), ``num_requests_running``, ``num_requests_waiting``, ``kv_cache_tokens``
    (tokens), ``num_preemptions`` (retractions, counter total), and ``spec_accept_length``,
    ``spec_accept_rate``, ``gen_throughput`` (tokens/s) as the server's gauges say them now.
    Keys the page lacks are absent."""
    per_rank: dict[str, dict[str | None, float]] = {}
    how: dict[str, str] = {}
    for name, labels, value in samples:
        mapped = KV_GAUGES.get(name) or SPEC_GAUGES.get(name)
        if mapped is None:
            continue
        key, how[key] = mapped
        ranks = per_rank.setdefault(key, {})
        rank = labels.get("dp_rank")
        ranks[rank] = max(ranks.get(rank, value), value)
    out: dict[str, Any] = {}
    for key, ranks in per_rank.items():
        total = sum(ranks.values())
        value = total / len(ranks) if how[key] == "mean" else total
        out[key] = int(value) if key in COUNT_KEYS else value
    return out


def sglang_spec_reading(*, state: dict[str, Any]) -> dict[str, float] | None:
    """The spec-decode gauges of one :func:`sglang_kv_state`, or None when the page has none."""
    if "spec_accept_length" not in state:
        return None
    keys = ("spec_accept_length", "spec_accept_rate", "gen_throughput")
    return {k: float(state[k]) for k in keys if k in state}


def sampled_gauge_summary(*, readings: list[dict[str, float]]) -> dict[str, Any]:
    """A run's acceptance from the spec gauges read through it (:func:`sglang_spec_reading`).

    Only readings taken after the server logged a decode interval count (``gen_throughput`` >
    0): before that SGLang's gauges hold their start-up 0 whether or not it speculates. Returns
    ``acceptance_source`` (``"sampled gauge"``), ``samples`` (readings taken), ``samples_used``,
    ``mean_acceptance_length`` (mean over the used readings, tokens per verification; None
    when none or when the server does not speculate), ``sglang_accept_rate`` (SGLang's own
    rate, see the module docstring), ``drafted_evidence`` (True when a reading is >= 1: the
    server ran a speculative algorithm; False when every used reading is 0; None without one)
    and ``spec_decode`` (``"not configured"`` when every used reading is 0).
    """
    used = [r for r in readings if r.get("gen_throughput", 1.0) > 0]
    lengths = [r["spec_accept_length"] for r in used]
    rates = [r["spec_accept_rate"] for r in used if "spec_accept_rate" in r]
    drafting = [v for v in lengths if v >= 1]
    out: dict[str, Any] = {
        "acceptance_source": SAMPLED_GAUGE,
        "samples": len(readings),
        "samples_used": len(used),
        "mean_acceptance_length": sum(drafting) / len(drafting) if drafting else None,
        "sglang_accept_rate": sum(rates) / len(rates) if rates and drafting else None,
        "drafted_evidence": bool(drafting) if lengths else None,
    }
    if lengths and not any(lengths):
        out["spec_decode"] = "not configured"
    return out
