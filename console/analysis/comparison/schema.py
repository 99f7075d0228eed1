"""The comparison's typed contract: what ``comparison_compute`` stores and what the pages, the
gate, the policies and the exports read. Schema version 2.

Units are in the names: ``_s`` seconds, ``_usd`` USD, ``_bytes`` bytes, ``_j`` joules, ``_rps``
requests/s, ``_per_s`` tokens/s; fractions are 0..1. NaN and inf are stored as null. A value
that could not be measured is null *and* says why (``measured`` False, ``reason``): nothing
downstream may read a null as a pass.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from console.experiments.endpoints import Endpoints

SCHEMA_VERSION = 2

Verdict = Literal["better", "worse", "not distinguishable", "not measured"]
Role = Literal["primary", "exploratory"]


class DeltaRow(TypedDict):
    """One paired candidate-vs-baseline comparison of one statistic of one metric."""

    metric: str
    stat: str
    base: float | None
    cand: float | None
    delta: float | None  # cand - base, in the metric's unit
    delta_lo: float | None
    delta_hi: float | None
    ratio: float | None  # cand / base
    ratio_lo: float | None
    ratio_hi: float | None
    p_value: float | None  # two-sided, of delta = 0
    p_holm: float | None  # Holm-adjusted over the primary family (primary rows only)
    n_pairs: int  # (request, repeat) rows defined in both arms
    n_requests: int  # distinct requests among them: the resampled unit
    n_excluded: int
    mc_error_rel: float | None  # Monte Carlo error of the bounds / interval width
    method: str  # "studentized" (means) or "percentile" (pNN)
    measured: bool
    reason: str | None  # why not measured
    noise_floor: float | None  # A/A floor in the metric's unit; None: no floor (one repeat)
    verdict: Verdict
    role: Role


class NoiseFloorRow(TypedDict):
    """The A/A noise floor of one statistic at one load (and slice): point differences between
    the baseline's repeats on the same requests."""

    load: str
    dimension: str | None  # None: all requests
    value: Any
    metric: str
    stat: str
    n_repeats: int
    n_repeat_pairs: int
    noise_floor: float | None  # largest |repeat a - repeat b| point difference
    noise_floor_rel: float | None  # the same relative to the baseline's pooled value
    p_value_min: float | None  # smallest repeat-pair p-value (all requests only)


class StabilityTest(TypedDict):
    load: str
    metric: str
    stat: str
    repeats: list[int]
    delta: float | None
    p_value: float | None
    p_holm: float | None


class BaselineStability(TypedDict):
    """Whether the baseline's repeats agree with each other: Holm over every repeat pair, load
    and gate metric. ``stable`` None with one repeat (not measured)."""

    stable: bool | None
    alpha: float
    tests: list[StabilityTest]
    flagged: list[StabilityTest]
    message: str | None


class QualityCountRow(TypedDict):
    """Complete quality counts for one candidate arm, load, task and check (never truncated)."""

    arm: str
    load: str
    task: str
    check: str  # json_valid, schema_valid, tool_valid, exact_match
    n_applicable: int  # paired requests where the check applies
    base_valid: int
    cand_valid: int
    regressions: int  # baseline valid, candidate not
    improvements: int  # candidate valid, baseline not
    mcnemar_p: float | None  # exact two-sided McNemar test on the discordant pairs
    baseline_flip_rate: float | None  # share of requests whose baseline repeats disagree


class CorrectnessRateRow(TypedDict):
    """Graded correctness of one arm, load and task (``console.analysis.grading``)."""

    arm: str
    load: str
    task: str
    n_requests: int  # distinct gradable requests: the resampled unit
    gradable: int  # graded rows (each repeat counts)
    correct: int
    rate: float  # correct / gradable
    interval_lo: float | None  # request-clustered interval of the rate
    interval_hi: float | None
    interval_method: str  # "bootstrap" (percentile, requests drawn) or "wilson" (all requests agree)
    interval: list[float | None]  # [interval_lo, interval_hi]


class Correctness(TypedDict):
    """Graded correctness: rates per arm x load x task, paired counts (``QualityCountRow`` with
    ``check`` "correct", read by the gate's quality criterion) and the regressions."""

    rates: list[CorrectnessRateRow]
    counts: list[QualityCountRow]
    regressions: list[dict[str, Any]]  # arm, load, request_id, repeat, task, reason
    n_regressions: int
    n_gradable: int  # rows with a reference
    n_not_gradable: int


class KneeStep(TypedDict):
    from_k: int
    to_k: int
    gain_s: float | None
    gain_lo: float | None
    gain_hi: float | None


class KneeRow(TypedDict):
    sweep: str
    load: str
    dimension: str | None
    value: Any
    points: list[dict[str, Any]]
    steps: list[KneeStep]
    knee_k: int | None
    reached: bool
    margin_s: float


class Summary(TypedDict, total=False):
    schema_version: int
    baseline_arm: str
    params: dict[str, Any]
    endpoints: Endpoints
    headline: list[dict[str, Any]]  # arm x load aggregates, with "deltas": list[DeltaRow]
    runs: list[dict[str, Any]]
    spread: list[dict[str, Any]]
    slices: list[dict[str, Any]]  # dimension x value x arm x load, with "deltas": list[DeltaRow]
    slice_dimensions: list[str]  # the dimensions of "slices" (turn_bucket only for multi-turn traces)
    slice_cdf: dict[str, Any]  # {"q": quantile levels, "series": [{dimension, value, metric, arm, load, x}]}
    acceptance: dict[str, list[dict[str, Any]]]
    # arm x load: did it draft, from which evidence (see .speculation); additive in version 2
    speculation: list[dict[str, Any]]
    # arm x load: KV capacity and pressure where the engine preallocates (vLLM; see .kv); additive
    kv: list[dict[str, Any]]
    quality: dict[str, Any]  # counts: list[QualityCountRow], regressions, divergence, first_divergences, ...
    correctness: Correctness
    # multi-turn sessions: by_arm_load (session counts, duration_s), by_turn (TTFT/e2e per turn)
    sessions: dict[str, list[dict[str, Any]]]
    primary: list[dict[str, Any]]  # the primary endpoints' rows, with arm, load and p_holm
    noise_floor: list[NoiseFloorRow]
    # what accelerator-hours (and so every cost and successes per accelerator-hour) are measured
    # on: "busy_time" (each run's seconds with a request in flight, metrics.busy_seconds); additive
    cost_basis: str  # "busy_time", or "capacity" where a capacity search ran
    capacity: dict[str, Any] | None  # comparison.capacity.capacity_stage; None: no search
    baseline_stability: BaselineStability
    knees: list[KneeRow]
    notes: list[str]
    cdf: dict[str, list[dict[str, Any]]]  # compute.latency_cdf
    # added by the selector that stores it (console.analysis.selectors)
    arm_order: list[str]
    load_order: list[str]
    load_weights: dict[str, float]  # the workload weights declared on the load levels; {} = none
    key: str
