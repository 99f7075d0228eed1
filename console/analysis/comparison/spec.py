"""What the comparison computes: metrics, statistics and slices (the headline statistics and the
declared endpoints are the experiment's: ``console.experiments.endpoints``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.experiments.endpoints import HEADLINE_STATS

HIGHER_IS_BETTER: frozenset[str] = frozenset({"met_deadline", "success", "class_goodput_rps"})
# Column of the derived frame behind each metric name.
METRIC_COLUMNS: dict[str, str] = {m: ("met_deadline_f" if m == "met_deadline" else m) for m in HEADLINE_STATS}
# Paired slice comparisons with intervals, per slice dimension: metric -> statistics. Every slice
# gets the statistics of the headline table's compared cells (so the comparison page can show any
# slice as it shows all requests); the traffic class (the class a release promises a latency
# benefit to) adds TTFT's and e2e's mean and p50 and the class's goodput.
SLICE_STATS: dict[str, tuple[str, ...]] = {
    "ttft_s": ("p95",),
    "tpot_s": ("mean", "p50", "p95"),
    "e2e_s": ("mean", "p95", "p99"),
    "success": ("mean",),
}
SLICE_INTERVALS: dict[str, dict[str, tuple[str, ...]]] = {
    "traffic_class": SLICE_STATS
    | {"ttft_s": ("mean", "p50", "p95"), "e2e_s": ("mean", "p50", "p95", "p99"), "class_goodput_rps": ("mean",)},
    "task": SLICE_STATS,
    "prompt_bucket": SLICE_STATS,
    "output_bucket": SLICE_STATS,
    "turn_bucket": SLICE_STATS,
    "run_output_bucket": SLICE_STATS,
}
# Per-request column behind a slice-only metric: a request's share of its traffic class's goodput
# (met its deadline x the class's requests in the run / the baseline's wall seconds at that load and
# repeat), whose mean over the class's requests in a run is the class's goodput in requests/s over
# the baseline's run time (see metrics.class_goodput).
SLICE_METRIC_COLUMNS: dict[str, str] = {"class_goodput_rps": "class_goodput_rps"}


def slice_intervals(dim: str) -> dict[str, tuple[str, ...]]:
    """The statistics with intervals of one slice dimension (every dimension has some)."""
    return dict(SLICE_INTERVALS.get(dim, SLICE_STATS))


# Per-slice point estimates copied into each slice row, with a delta against the baseline.
SLICE_POINT_COLUMNS: tuple[str, ...] = (
    "ttft_s_p95",
    "tpot_s_p50",
    "tpot_s_p95",
    "e2e_s_p95",
    "e2e_s_p99",
    "goodput_rps",
    "deadline_attainment",
)
RUN_SPREAD_COLUMNS: tuple[str, ...] = (
    "ttft_s_p95",
    "tpot_s_p50",
    "tpot_s_p95",
    "e2e_s_p95",
    "e2e_s_p99",
    "itl_chunk_s_p95",
    "completed_rps",
    "goodput_rps",
    "output_tokens_per_s",
    "acceptance_rate",
    "peak_memory_bytes",
    "cost_per_success_usd",
)
KNEE_METRIC, KNEE_STAT = "tpot_s", "p50"
# Metrics whose repeat-vs-repeat agreement decides whether the baseline is stable.
STABILITY_STATS: dict[str, tuple[str, ...]] = {"ttft_s": ("p95",), "tpot_s": ("p95",), "e2e_s": ("p95",)}


# What the hf engine records in a run's versions when the draft's tokenizer is not the target's
# (workers/engines/hf.py): transformers' universal assisted generation, greedy only.
CROSS_VOCABULARY_KEY, CROSS_VOCABULARY_PREFIX = "draft_tokenizer", "different"


def draft_cross_vocabulary(versions: Mapping[str, Any] | None) -> bool:
    """Whether a run's recorded ``versions`` say its draft model has another vocabulary than the
    target (a cross-vocabulary, "universal" assistant): its outputs are checked for exactness under
    greedy decoding only, so it needs a gate of its own."""
    return str((versions or {}).get(CROSS_VOCABULARY_KEY) or "").startswith(CROSS_VOCABULARY_PREFIX)
