"""The comparison's typed contract: what ``comparison_compute`` stores and what the pages, the
gate, the policies, the exports and the API read. Schema version 2.

Units are in the names: ``_s`` seconds, ``_usd`` USD, ``_bytes`` bytes, ``_j`` joules, ``_rps``
requests/s, ``_per_s`` tokens/s; fractions are 0..1. NaN and inf are stored as null. A value
that could not be measured is null *and* says why where the stages know why (``measured`` False
and ``reason`` on a paired comparison, ``cost_per_success_reason`` beside a cost, ``stable``
None with one repeat): nothing downstream may read a null as a pass. Every field is present in
every stored comparison; the few that a stage writes only when it has them (a result id, a
declared SLO bound) are said so where they are declared.

Every model is frozen and refuses unknown keys, so a stage that builds another shape fails at
once: ``comparison_compute`` validates what it returns through :class:`Comparison`, the service
that stores it through :class:`Summary` (the comparison plus the experiment's arm and load order
and the cache key), and :func:`summary_load` reads a stored one back, with a
:class:`ComparisonSchemaError` that says what to do with one it cannot read. The JSON stays the
stages': ``Summary.model_dump(mode="json")`` of a loaded summary equals what was stored.

The builders' own TypedDicts (what the stages fill in) are in :mod:`.rows`.

Long because: the contract is one document, field for field, and every consumer reads it here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

SCHEMA_VERSION = 2

Verdict = Literal["better", "worse", "not distinguishable", "not measured"]
Role = Literal["primary", "exploratory"]
# A float the stages may not have measured: NaN and inf are stored as null.
Value = float | None
Pair = tuple[float | None, float | None]  # [lo, hi]; null for an end that is not known
# A number stored as an int or a float as it came (a count's median, bytes, a deadline typed in):
# read as either, so the JSON the API writes is the stored one digit for digit.
Number = int | float


def _none(value: object) -> bool:
    return value is None


def _absent() -> Any:
    """A field some inputs never give (a result id the frame lacked, an SLO bound not declared):
    None when absent, and left out of the JSON again, as the stage left it out."""
    return Field(None, exclude_if=_none)


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ComparisonSchemaError(ValueError):
    """A stored comparison this console cannot read: another schema version, or another shape."""


# --- the paired comparisons -----------------------------------------------------------------


class DeltaRow(Record):
    """One paired candidate-vs-baseline comparison of one statistic of one metric."""

    base: Value
    cand: Value
    delta: Value  # cand - base, in the metric's unit
    ratio: Value  # cand / base
    n_requests: int  # distinct requests among the pairs: the resampled unit
    delta_lo: Value
    delta_hi: Value
    ratio_lo: Value
    ratio_hi: Value
    p_value: Value  # two-sided, of delta = 0
    mc_error_rel: Value  # Monte Carlo error of the bounds / interval width
    method: Literal["studentized", "percentile"]  # means / pNN
    measured: bool
    reason: str | None  # why not measured
    metric: str
    stat: str
    n_pairs: int  # (request, repeat) rows defined in both arms
    n_excluded: int
    noise_floor: Value  # A/A floor in the metric's unit; None: no floor (one repeat)
    p_holm: Value  # Holm-adjusted over the primary family (primary rows only)
    role: Role
    verdict: Verdict


class PrimaryRow(DeltaRow):
    """A declared primary endpoint of one candidate arm at one load, Holm-corrected over its
    family (the promised class's primary latency metric, or its success metric)."""

    arm: str
    load: str
    family_size: int


class NoiseFloorRow(Record):
    """The A/A noise floor of one statistic at one load (and slice): point differences between
    the baseline's repeats on the same requests."""

    load: str
    dimension: str | None  # None: all requests
    value: str | None
    metric: str
    stat: str
    n_repeats: int
    n_repeat_pairs: int
    noise_floor: Value  # largest |repeat a - repeat b| point difference; None: not measured
    noise_floor_rel: Value  # the same relative to the baseline's pooled value
    p_value_min: Value  # smallest repeat-pair p-value (all requests only)


class StabilityTest(Record):
    load: str
    metric: str
    stat: str
    repeats: tuple[int, ...]  # the two repeats compared
    delta: Value
    p_value: Value
    p_holm: Value


class BaselineStability(Record):
    """Whether the baseline's repeats agree with each other: Holm over every repeat pair, load
    and gate metric. ``stable`` None with one repeat (not measured)."""

    stable: bool | None
    alpha: float
    tests: tuple[StabilityTest, ...]
    flagged: tuple[StabilityTest, ...]
    message: str | None

    @property
    def measured(self) -> bool:
        return self.stable is not None


class KneePoint(Record):
    arm: str
    k: int  # draft length; 0 is the baseline
    tpot_s_p50: Value


class KneeStep(Record):
    """The paired TPOT p50 gain (seconds, positive = faster) of one step of a sweep."""

    from_k: int
    to_k: int
    gain_s: Value
    gain_lo: Value
    gain_hi: Value
    measured: bool


class KneeRow(Record):
    sweep: str
    load: str
    dimension: str | None
    value: str | None
    points: tuple[KneePoint, ...]
    steps: tuple[KneeStep, ...]
    margin_s: float
    knee_k: int | None
    reached: bool  # False: every step paid (the knee is the largest k tested)


class Endpoints(Record):
    """What the experiment declared before it ran; the gate judges these only."""

    promised_class: str
    primary_metric: str
    primary_stat: str
    success_metric: str
    success_stat: str
    alpha: float
    knee_margin_s: float


# --- the aggregate tables: per run, per arm x load, per slice -------------------------------


# The table rows below list their bases in reverse: pydantic lays out a model's fields from its
# last base to its first, and this order keeps the stored key order (keys first) on dump.


class ArmLoad(Record):
    arm: str
    load: str


class RequestLatencies(Record):
    """Per-request latencies over a group (seconds): percentiles and mean of each."""

    ttft_s_p50: Value
    ttft_s_p90: Value
    ttft_s_p95: Value
    ttft_s_p99: Value
    ttft_s_mean: Value
    ttft_from_send_s_p50: Value
    ttft_from_send_s_p90: Value
    ttft_from_send_s_p95: Value
    ttft_from_send_s_p99: Value
    ttft_from_send_s_mean: Value
    tpot_s_p50: Value
    tpot_s_p90: Value
    tpot_s_p95: Value
    tpot_s_p99: Value
    tpot_s_mean: Value
    e2e_s_p50: Value
    e2e_s_p90: Value
    e2e_s_p95: Value
    e2e_s_p99: Value
    e2e_s_mean: Value
    queue_s_p50: Value
    queue_s_p90: Value
    queue_s_p95: Value
    queue_s_p99: Value
    queue_s_mean: Value
    itl_chunk_mean_s_p50: Value
    itl_chunk_mean_s_p90: Value
    itl_chunk_mean_s_p95: Value
    itl_chunk_mean_s_p99: Value
    itl_chunk_mean_s_mean: Value


class PooledGaps(Record):
    """Inter-token gaps pooled over a group's requests (seconds): between chunks, per token."""

    itl_chunk_s_p50: Value
    itl_chunk_s_p90: Value
    itl_chunk_s_p95: Value
    itl_chunk_s_p99: Value
    itl_chunk_s_mean: Value
    itl_token_s_p50: Value
    itl_token_s_p90: Value
    itl_token_s_p95: Value
    itl_token_s_p99: Value
    itl_token_s_mean: Value


class Volume(Record):
    """Counts and rates of a group (``latency.metrics_aggregate``)."""

    n_requests: int
    n_completed: int
    n_met_deadline: int
    output_tokens: int
    n_runs: int
    n_failed: int
    wall_s: Value  # summed over the group's runs
    completed_rps: Value
    goodput_rps: Value
    output_tokens_per_s: Value
    deadline_attainment: Value


class Acceptance(Record):
    """Speculation over a group: tokens drafted and accepted; rates None when nothing drafted."""

    steps: int
    drafted: int
    accepted: int
    drafts: int
    acceptance_rate: Value  # accepted / drafted
    mean_acceptance_length: Value  # 1 + accepted / drafts
    accepted_per_pass: Value
    target_passes: int
    tokens_per_pass: Value  # output tokens per target forward pass, drafting or not


class Validity(Record):
    """Output checks over a group: counts valid and rates among the requests a check applies
    to (None: the check applied to none), and the success share."""

    n_json_valid: int
    json_valid_rate: Value
    n_schema_valid: int
    schema_valid_rate: Value
    n_tool_valid: int
    tool_valid_rate: Value
    n_exact_match: int
    exact_match_rate: Value
    output_valid_rate: Value
    success_mean: Value


class Costs(Record):
    """Resources and cost of a group (``console.analysis.cost``): accelerator-hours on busy
    time; a cost None says why beside it."""

    busy_s: float
    accelerator_hours: float
    cost_usd: float
    successes: int
    peak_memory_bytes: Number | None
    mean_util: Value  # percent 0-100 (NVML); None: not measured (no accelerator sampled)
    energy_cost_included: bool
    energy_j: Value  # None: not measured by every run
    cost_per_success_usd: Value
    cost_per_success_reason: str | None
    cost_per_million_output_tokens_usd: Value
    cost_per_million_output_tokens_reason: str | None


class HeadlineRow(Costs, Validity, Acceptance, Volume, PooledGaps, RequestLatencies, ArmLoad):
    """One arm at one load: its aggregates and its paired comparisons with the baseline."""

    is_baseline: bool
    n_regressions: int  # quality regressions against the baseline
    # 95% interval of acceptance_rate, requests the unit (console.analysis.acceptance_interval);
    # None: fewer than 12 requests drafted (or none did)
    acceptance_rate_lo: Value
    acceptance_rate_hi: Value
    deltas: tuple[DeltaRow, ...]  # empty for the baseline


class RunKey(ArmLoad):
    repeat: int
    run_id: int


class RunRow(Costs, Validity, Acceptance, Volume, PooledGaps, RequestLatencies, RunKey):
    """One run: its aggregates, its resources and what its server counted."""

    accelerator_count: int
    energy_kwh: Value
    # The run's server counter deltas as the worker stored them (keys are the server's own
    # metric names, ``kv`` the KV-cache figures); None: the engine reported none.
    spec_counters: dict[str, JsonValue] | None


def _flat_name(delta: DeltaRow | Mapping[str, Any], part: str) -> str:
    metric, stat = (delta.metric, delta.stat) if isinstance(delta, DeltaRow) else (delta["metric"], delta["stat"])
    return f"{metric}_{stat}_{part}"


FLAT_PARTS = ("delta", "delta_lo", "delta_hi")


def _slice_row_flat_schema(schema: dict[str, Any]) -> None:
    schema["additionalProperties"] = {"anyOf": [{"type": "number"}, {"type": "null"}]}
    schema["description"] = (
        "One slice x arm x load. Beside the fields, a flat copy of every paired comparison's bounds: "
        "{metric}_{stat}_delta, _delta_lo and _delta_hi of each row of deltas."
    )


class SliceKey(Record):
    dimension: str
    arm: str
    load: str
    value: str


class SliceRow(Validity, Acceptance, Volume, RequestLatencies, SliceKey):
    """One slice (dimension = value) x arm x load: its aggregates, point deltas against the
    baseline's slice, and its paired comparisons. Stored with a flat copy of every paired
    delta and bound (``{metric}_{stat}_delta``, ``_delta_lo``, ``_delta_hi``), for tables that
    read one cell per metric and statistic; the model reads them from ``deltas`` and writes them
    back on dump, so they cannot disagree."""

    model_config = ConfigDict(json_schema_extra=_slice_row_flat_schema)

    # Point deltas against the baseline's slice (where a paired comparison of the same
    # statistic exists, its delta: the flat copy overwrites the point one).
    ttft_s_p95_delta: Value
    tpot_s_p50_delta: Value
    tpot_s_p95_delta: Value
    e2e_s_p95_delta: Value
    e2e_s_p99_delta: Value
    goodput_rps_delta: Value
    deadline_attainment_delta: Value
    deltas: tuple[DeltaRow, ...]

    @model_validator(mode="before")
    @classmethod
    def _flat_copies_dropped(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        flat: dict[str, Any] = {}
        for d in data.get("deltas") or ():
            for part in FLAT_PARTS:
                flat[_flat_name(d, part)] = getattr(d, part) if isinstance(d, DeltaRow) else d.get(part)
        for name, value in data.items():
            if name in flat and name not in cls.model_fields and value != flat[name]:
                raise ValueError(f"{name}: {value!r}, but its paired comparison says {flat[name]!r}")
        return {k: v for k, v in data.items() if k in cls.model_fields or k not in flat}

    # No return type: with one, the serialization schema (the API's) would be that type, not the fields.
    @model_serializer(mode="wrap")
    def _flat_copies_written(self, handler: SerializerFunctionWrapHandler):
        out = handler(self)
        for delta in self.deltas:
            for part in FLAT_PARTS:
                out[_flat_name(delta, part)] = getattr(delta, part)
        return out


class SpreadRow(Record):
    """Run-to-run spread of one column across an arm's repeats at a load (the column's unit)."""

    arm: str
    load: str
    metric: str
    n_runs: int
    mean: Value
    std: Value  # sample (ddof=1); None for one run
    min: Value
    max: Value


# --- latency quantiles for the CDF charts ---------------------------------------------------


class CdfSeries(Record):
    arm: str
    load: str
    x: tuple[float, ...]  # seconds, the y quantiles
    y: tuple[float, ...]  # 0..1


class LatencyCdf(Record):
    """Quantiles (101 points) of each latency per arm x load, in the order groups first appear."""

    ttft_s: tuple[CdfSeries, ...]
    tpot_s: tuple[CdfSeries, ...]
    e2e_s: tuple[CdfSeries, ...]

    def of(self, metric: str) -> tuple[CdfSeries, ...]:
        """The series of one of the three metrics (``ttft_s``, ``tpot_s``, ``e2e_s``)."""
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}[metric]


class SliceCdfSeries(Record):
    dimension: str
    value: str
    metric: str
    arm: str
    load: str
    x: tuple[float, ...]  # seconds, at the levels of SliceCdf.q


class SliceCdf(Record):
    q: tuple[float, ...]  # quantile levels, 0..1 (41 points)
    series: tuple[SliceCdfSeries, ...]


# --- acceptance, speculation and the KV cache ----------------------------------------------


class AcceptanceCounts(Record):
    arm: str
    load: str
    steps: int
    drafted: int
    accepted: int
    drafts: int
    acceptance_rate: Value
    mean_acceptance_length: Value
    accepted_per_pass: Value


class AcceptanceByTask(AcceptanceCounts):
    task: str


class AcceptanceByClass(AcceptanceCounts):
    traffic_class: str


class AcceptanceByOutputPosition(AcceptanceCounts):
    position_bucket: str  # output tokens, "lo-hi" or "lo+"
    position_start: int


class AcceptanceByTaskOutputPosition(AcceptanceByOutputPosition):
    task: str


class AcceptanceByPosition(Record):
    """Per draft position j (1-based): proposed and accepted there; ``rate`` the conditional
    P(accepted | proposed), ``rate_per_draft`` vLLM's accepted at j / drafts."""

    arm: str
    load: str
    position: int
    proposed: int
    accepted: int
    drafts: int
    rate_per_draft: Value
    rate: Value


class AcceptanceByTaskPosition(AcceptanceByPosition):
    task: str


class AcceptanceTables(Record):
    by_task: tuple[AcceptanceByTask, ...]
    by_traffic_class: tuple[AcceptanceByClass, ...]
    by_position: tuple[AcceptanceByPosition, ...]
    by_task_position: tuple[AcceptanceByTaskPosition, ...]
    by_output_position: tuple[AcceptanceByOutputPosition, ...]
    by_task_output_position: tuple[AcceptanceByTaskOutputPosition, ...]


class ServerAcceptance(Record):
    """Acceptance from the server's run-level counters (``acceptance.server_acceptance``)."""

    drafts: int
    drafted: int
    accepted: int
    acceptance_rate: Value
    mean_acceptance_length: Value
    rate_per_draft_by_position: tuple[float, ...]


class SpeculationRow(Record):
    """Did one arm speculate at one load, and from which evidence (``.speculation``)."""

    arm: str
    load: str
    is_baseline: bool
    speculative: bool | None  # configured to speculate; None: labels unknown
    server: ServerAcceptance | None  # None unless every run had the server's totals
    source: str | None  # a source constant of .speculation (PER_REQUEST, RUN_LEVEL, ...); None: not measured
    drafts: int | None
    drafted: int | None
    accepted: int | None
    acceptance_rate: Value
    mean_acceptance_length: Value
    rate_per_draft_by_position: tuple[float, ...] | None
    drafted_evidence: bool | None = None  # the evidence shows drafting; None: unknown
    did_not_speculate: bool
    reason: str | None  # why whichever flag is set (did_not_speculate, no_evidence, config_mismatch)
    # Added after the first stored comparisons (default for those): a speculative arm without any
    # acceptance evidence; drafts that contradict the arm's config (.draft_checks); the most
    # tokens one step drafted (None without per-step lists).
    no_evidence: bool = False
    config_mismatch: bool = False
    max_drafted_per_step: int | None = None


class EnvironmentValue(Record):
    """One value a compared field took, and the arms and runs that recorded it."""

    value: str
    arms: tuple[str, ...]
    run_ids: tuple[int, ...]


class EnvironmentMismatch(Record):
    field: str  # e.g. gpu_names, cpu_model, torch, transformers, vllm, server
    values: tuple[EnvironmentValue, ...]
    message: str  # names the field, each value's arms and runs


class Environment(Record):
    """Did every run run on the same hardware class, driver and versions (``.environment``)."""

    fields: tuple[str, ...]  # compared (recorded by at least one run)
    n_runs_recorded: int  # runs with a hardware or versions record; 0: not checked
    mismatches: tuple[EnvironmentMismatch, ...]
    notes: tuple[str, ...]  # fields some runs did not record: not compared for them


class KvRow(Record):
    """KV capacity and pressure of one arm at one load, where the engine preallocates (``.kv``)."""

    arm: str
    load: str
    is_baseline: bool
    n_runs: int
    kv_cache_tokens: Value  # tokens; None: not measured
    kv_capacity_lost: Value  # 1 - tokens / the baseline's; None for the baseline or unknown
    kv_usage_peak: Value
    kv_usage_mean: Value
    preemptions: Value  # mean per run; None unless every run counted them
    preemptions_runs: tuple[float | None, ...]
    preemptions_floor: Value
    running_peak: Value
    waiting_peak: Value


class SaturationRow(Record):
    """Whether one arm was past saturation at one load (``.saturation``): the medians over its
    runs of the rates (requests/s) and of the first and last thirds' waits (seconds)."""

    arm: str
    load: str
    is_baseline: bool
    n_runs: int
    arrival_rps: Value
    completed_rps: Value
    wait_first_s: Value  # median wait (scheduled -> first token), first third by arrival
    wait_last_s: Value  # ... last third
    rate_short: bool | None  # completed rate below the tolerance x the arrival rate
    waits_grew: bool | None
    saturated: bool | None  # None: not measured (``reason``)
    reason: str | None


# --- sessions, quality and correctness ------------------------------------------------------


class SessionsByArmLoad(Record):
    arm: str
    load: str
    n_sessions: int
    n_multi_turn: int
    turns_mean: Value
    n_sessions_completed: int
    session_completed_share: Value
    session_duration_s_p50: Value
    session_duration_s_p90: Value
    session_duration_s_p95: Value
    session_duration_s_p99: Value
    session_duration_s_mean: Value


class SessionsByTurn(Record):
    arm: str
    load: str
    turn: int  # 0-based
    n_requests: int
    n_completed: int
    ttft_s_p50: Value
    ttft_s_p90: Value
    ttft_s_p95: Value
    ttft_s_p99: Value
    ttft_s_mean: Value
    e2e_s_p50: Value
    e2e_s_p90: Value
    e2e_s_p95: Value
    e2e_s_p99: Value
    e2e_s_mean: Value


class Sessions(Record):
    by_arm_load: tuple[SessionsByArmLoad, ...]
    by_turn: tuple[SessionsByTurn, ...]


class QualityCountRow(Record):
    """Complete quality counts for one candidate arm, load, task and check (never truncated)."""

    arm: str
    load: str
    task: str
    check: str  # json_valid, schema_valid, tool_valid, exact_match; "correct" in correctness
    n_applicable: int  # paired requests where the check applies
    base_valid: int
    cand_valid: int
    regressions: int  # baseline valid, candidate not
    improvements: int  # candidate valid, baseline not
    mcnemar_p: Value  # exact two-sided McNemar test on the discordant pairs
    baseline_flip_rate: Value  # share of requests whose baseline repeats disagree


class QualityRegression(Record):
    """A candidate request that failed a check its paired baseline request passed."""

    arm: str
    load: str
    request_id: str
    repeat: int
    task: str
    traffic_class: str
    checks: str  # the regressed checks, comma-separated
    baseline_run_id: int
    candidate_run_id: int
    baseline_result_id: int | None = _absent()  # absent when the results had no ids
    candidate_result_id: int | None = _absent()
    reason: str | None  # the candidate's first failing check


class Divergence(Record):
    arm: str
    load: str
    n_compared: int
    n_diverged: int
    first_divergence_p50: Number | None  # tokens


class FirstDivergence(Record):
    """Where a candidate output first differs from its baseline's (``quality_pairs``)."""

    arm: str
    load: str
    request_id: str
    repeat: int
    task: str
    position: int | None  # 0-based token index; None when only texts were compared
    context: str
    baseline_text: str
    candidate_text: str
    baseline_result_id: int | None = _absent()  # absent when the results had no ids
    candidate_result_id: int | None = _absent()


class Quality(Record):
    counts: tuple[QualityCountRow, ...]
    regressions: tuple[QualityRegression, ...]  # the first rows; n_regressions counts all
    n_regressions: int
    truncated: bool
    divergence: tuple[Divergence, ...]
    first_divergences: tuple[FirstDivergence, ...]


class CorrectnessRate(Record):
    """Graded correctness of one arm, load and task (``console.analysis.grading``)."""

    arm: str
    load: str
    task: str
    n_requests: int  # distinct gradable requests: the resampled unit
    gradable: int  # graded rows (each repeat counts)
    correct: int
    rate: float  # correct / gradable
    interval_lo: Value  # request-clustered interval of the rate
    interval_hi: Value
    interval_method: str  # "bootstrap" (percentile, requests drawn) or "wilson" (all requests agree)
    interval: Pair


class CorrectnessRegression(Record):
    arm: str
    load: str
    request_id: str
    repeat: int
    task: str
    reason: str | None


class Correctness(Record):
    """Graded correctness: rates per arm x load x task, paired counts (``check`` "correct",
    read by the gate's quality criterion) and the regressions."""

    rates: tuple[CorrectnessRate, ...]
    counts: tuple[QualityCountRow, ...]
    regressions: tuple[CorrectnessRegression, ...]
    n_regressions: int
    n_gradable: int  # rows with a reference
    n_not_gradable: int


# --- capacity at the SLO --------------------------------------------------------------------


class CapacitySlo(Record):
    """The SLO every capacity step was judged on: only the bounds the experiment declared
    (an undeclared bound is None here and absent from the JSON)."""

    traffic_class: str
    attainment: float | None = _absent()
    p95_tpot_s: float | None = _absent()
    p95_e2e_s: float | None = _absent()


class CapacitySearchOptions(Record):
    lo: float | None  # rate multipliers bracketing the search
    hi: float | None
    steps: int | None  # runs per arm and repeat


class CapacitySearch(Record):
    """One repeat's search (``capacity_stage.search_result``)."""

    rate_multiplier: Value  # highest passing; None: nothing passed
    bracket: Pair  # [highest pass, lowest fail]
    censored: Literal["below", "above"] | None
    non_monotone: bool
    n_steps: int
    repeat: int


class CapacityStep(Record):
    repeat: int
    step: int
    run_id: int
    rate_multiplier: float
    offered_rps: Value
    attainment: Value
    p95_tpot_s: Value
    p95_e2e_s: Value  # None when a failed request made it infinite (``reasons`` says)
    success_rate: float
    passed: bool
    reasons: tuple[str, ...]


class CapacityArm(Record):
    """One arm's capacity at the SLO (``.capacity_stage``, docs/capacity.md)."""

    arm: str
    is_baseline: bool
    rate_multiplier: Value  # geometric mean over repeats; None: a repeat found none
    interval: Pair  # envelope of the repeats' brackets
    n_repeats: int
    searches: tuple[CapacitySearch, ...]
    slo: CapacitySlo
    steps: tuple[CapacityStep, ...]
    successes_per_hour: Value
    cost_per_success_usd: Value
    cost_reason: str | None  # why no cost
    notes: tuple[str, ...]
    ratio: Value  # capacity / the baseline's; None for the baseline
    ratio_interval: Pair


class Capacity(Record):
    slo: CapacitySlo
    search: CapacitySearchOptions
    interval_method: str
    arms: tuple[CapacityArm, ...]


# --- the comparison --------------------------------------------------------------------------


class Params(Record):
    """What the comparison was computed with."""

    deadlines: dict[str, dict[str, Number]] | None  # per traffic class: {"ttft_s", "e2e_s"} seconds
    cost_per_hour_usd: float  # per accelerator-hour
    power_price_usd_per_kwh: float | None
    sweeps: dict[str, dict[str, int]]  # sweep -> {arm: draft length k}
    n_boot: int
    seed: int
    ci: float  # two-sided interval level
    resampling_unit: Literal["request"]


class Comparison(Record):
    """What ``comparison_compute`` returns, its sections in the order it writes them."""

    schema_version: int
    baseline_arm: str
    params: Params
    endpoints: Endpoints
    headline: tuple[HeadlineRow, ...]  # arm x load
    primary: tuple[PrimaryRow, ...]  # the primary endpoints' rows
    runs: tuple[RunRow, ...]
    spread: tuple[SpreadRow, ...]
    slices: tuple[SliceRow, ...]  # dimension x value x arm x load
    # turn_bucket only for multi-turn traces; run_output_bucket only for two or more declared
    # output buckets (Experiment.output_buckets, each replayed in runs of its own)
    slice_dimensions: tuple[str, ...]
    slice_cdf: SliceCdf
    cdf: LatencyCdf
    acceptance: AcceptanceTables
    speculation: tuple[SpeculationRow, ...]  # arm x load: did it draft, from which evidence
    # same hardware, driver and versions across the runs; None (absent): stored before the check
    environment: Environment | None = _absent()
    # per arm, where its peak memory came from (.memory_sources); None (absent): stored before
    memory_sources: dict[str, str] | None = _absent()
    kv: tuple[KvRow, ...]  # arm x load, where the engine preallocates (vLLM); else empty
    # arm x load: past saturation over the replay window; None (absent): stored before the check
    saturation: tuple[SaturationRow, ...] | None = _absent()
    sessions: Sessions
    quality: Quality
    correctness: Correctness
    # what accelerator-hours (and so every cost) are measured on: each run's busy time, or the
    # capacity at the SLO where a capacity search ran
    cost_basis: Literal["busy_time", "capacity"]
    capacity: Capacity | None  # None: no search
    noise_floor: tuple[NoiseFloorRow, ...]
    baseline_stability: BaselineStability
    knees: tuple[KneeRow, ...]
    notes: tuple[str, ...]

    @field_validator("schema_version")
    @classmethod
    def _current_version(cls, version: int) -> int:
        if version != SCHEMA_VERSION:
            raise ValueError(f"schema version {version}, this console reads {SCHEMA_VERSION}")
        return version


class Summary(Comparison):
    """The stored comparison: what ``comparison_compute`` returned, plus what the selector and
    the service that store it add from the experiment."""

    arm_order: tuple[str, ...]  # the experiment's arms by position
    load_order: tuple[str, ...]  # its load levels as declared
    load_weights: dict[str, float]  # the workload weights declared on the load levels; {} = none
    key: str  # the identity of the runs and parameters it was computed from


def _load(model: type[Comparison], data: Any) -> Comparison:
    if not isinstance(data, Mapping):
        raise ComparisonSchemaError(f"comparison stored as {type(data).__name__}, not an object: recompute it")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        stored = "without a schema version" if version is None else f"with schema version {version}"
        raise ComparisonSchemaError(
            f"comparison stored {stored}; this console reads version {SCHEMA_VERSION}: recompute it"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        where = ".".join(str(part) for part in first["loc"]) or "the top level"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ComparisonSchemaError(
            f"comparison stored in another shape than version {SCHEMA_VERSION}'s: {where}: {first['msg']}{more}; "
            "recompute it"
        ) from exc


def summary_load(data: Any) -> Summary:
    """A stored comparison, read through the model. Raises :class:`ComparisonSchemaError` for
    another schema version or another shape (naming the first field that does not fit)."""
    loaded = _load(Summary, data)
    assert isinstance(loaded, Summary)
    return loaded


def comparison_load(data: Any) -> Comparison:
    """A comparison as ``comparison_compute`` returns it (a stored one, with the fields storing
    adds, loads as its :class:`Summary`). Raises :class:`ComparisonSchemaError` like
    :func:`summary_load`."""
    stored = isinstance(data, Mapping) and any(name in data for name in STORED_FIELDS)
    return _load(Summary if stored else Comparison, data)


STORED_FIELDS = tuple(name for name in Summary.model_fields if name not in Comparison.model_fields)
