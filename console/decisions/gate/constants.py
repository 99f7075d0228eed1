"""The gate's vocabulary: the criteria and their titles, the metrics it reads and their
direction, the cost bases of criterion 1, and the default settings every deviation is measured
against."""

from __future__ import annotations

from typing import Any

PASS, FAIL, NOT_MEASURED = "pass", "fail", "not_measured"

CRITERIA: tuple[tuple[str, str], ...] = (
    ("task_improvement", "Workload-weighted improvement in acceptable completed tasks"),
    ("latency_benefit", "Clear latency benefit for the promised class"),
    ("quality", "No regression in critical quality"),
    ("memory_headroom", "Memory headroom"),
    ("load_stability", "Stable across load levels"),
)
POLICY_CRITERION = ("policy_holdout", "The slice policy pays on held-out traffic")
# A decision to keep speculation off is judged as that choice (console.decisions.gate.keep_off).
KEEP_OFF_CRITERION = ("keep_off", "No candidate shows a clear benefit that keeping speculation off would forgo")
TITLES = dict([*CRITERIA, POLICY_CRITERION, KEEP_OFF_CRITERION])

HIGHER_IS_BETTER = frozenset(
    {
        "success",
        "met_deadline",
        "goodput_rps",
        "successes_per_accelerator_hour",
        "completed_rps",
        "output_tokens_per_s",
        "attainment",
        "acceptance_rate",
    }
)
LATENCY_METRICS: tuple[str, ...] = ("ttft_s", "tpot_s", "e2e_s", "itl_chunk_mean_s")
STAT_NAMES: tuple[str, ...] = ("mean", "p50", "p95", "p99")
STABILITY_METRIC_NAMES: tuple[str, ...] = (*LATENCY_METRICS, "success", "met_deadline", "successes_per_accelerator_hour")
EFFICIENCY_METRIC = "successes_per_accelerator_hour"
MAX_SUCCESS_MARGIN = 0.2  # a "not worse" that allows more than 20 points is no longer a guard
# What criterion 1 prices successes on; the comparison's ``cost_basis`` must say the same.
COST_BASES = {
    "busy_time": "busy accelerator-hours (each run's seconds with a request in flight)",
    "capacity": "capacity at the SLO (the highest arrival rate each arm sustains within its SLO, from a capacity search)",
}

DEFAULT_SETTINGS: dict[str, Any] = {
    "success_margin": 0.01,
    "load_weights": {},
    "loads_in_scope": [],
    "guard_latency_metrics": ["ttft_s:p95", "e2e_s:p95"],
    "quality_thresholds": {"json": 0.0, "tool_call": 0.0, "*": 0.01},
    "memory_fraction": 0.9,
    "memory_capacity_bytes": None,
    "stability_metrics": [
        "tpot_s:p95",
        "e2e_s:p95",
        "ttft_s:p95",
        "success:mean",
        "met_deadline:mean",
        "successes_per_accelerator_hour:mean",
    ],
}
MAX_CAPACITY_BYTES = 2**50  # 1 PiB: anything above is a typo
