"""What the comparison's stages fill in: the TypedDicts of the rows and sections they build, as
plain JSON-ready dicts. The reader contract is :mod:`.schema` (pydantic models of the same
rows, field for field); ``comparison_compute`` validates what the stages built through it.
Units as there: ``_s`` seconds, fractions 0..1, NaN stored as null."""

from __future__ import annotations

from typing import Any, TypedDict

from console.analysis.comparison.schema import Role, Verdict


class DeltaRow(TypedDict):
    """One paired candidate-vs-baseline comparison of one statistic of one metric
    (``schema.DeltaRow``)."""

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
    """The A/A noise floor of one statistic at one load and slice (``schema.NoiseFloorRow``)."""

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
    """Whether the baseline's repeats agree (``schema.BaselineStability``); ``stable`` None with
    one repeat (not measured)."""

    stable: bool | None
    alpha: float
    tests: list[StabilityTest]
    flagged: list[StabilityTest]
    message: str | None


class Correctness(TypedDict):
    """Graded correctness (``schema.Correctness``): records of ``grading``'s frames."""

    rates: list[dict[str, Any]]
    counts: list[dict[str, Any]]
    regressions: list[dict[str, Any]]  # arm, load, request_id, repeat, task, reason
    n_regressions: int
    n_gradable: int  # rows with a reference
    n_not_gradable: int


class Endpoints(TypedDict):
    """What the experiment declared before it ran (``schema.Endpoints``); the gate judges these
    only."""

    promised_class: str
    primary_metric: str
    primary_stat: str
    success_metric: str
    success_stat: str
    alpha: float
    knee_margin_s: float
