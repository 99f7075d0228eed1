"""``comparison_compute``: the one entry point that turns per-request results into the stored
comparison (schema in :mod:`console.analysis.comparison.schema`), stage by stage:

1. derive per-request metrics, slices, quality flags and success (:mod:`.derive`);
2. aggregates per run, arm x load and slice, acceptance, costs, saturation (:mod:`.aggregates`);
3. the noise floor and the baseline's stability (:mod:`.noise`);
4. paired, request-clustered comparisons per load (:mod:`.paired`), the primary endpoints with
   Holm's correction, and the knees (:mod:`.knee`);
5. quality counts and regressions, graded correctness (:mod:`.quality_stage`), acceptance tables
   (:mod:`.acceptance_stage`), and whether each speculative candidate drafted at all, and as
   configured (:mod:`.speculation`); the capacity at the SLO (:mod:`.capacity_stage`);
   whether every run ran on the same hardware and software (:mod:`.environment`).

Each stage is a function of its own module; this one calls them in order and assembles the
summary.

Pure numpy/pandas; no Django.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd

from console.analysis.comparison.acceptance_stage import acceptance_tables, session_tables
from console.analysis.comparison.aggregates import Aggregator, Tables, aggregates_stage, run_costs_frame
from console.analysis.comparison.bootstrap import DEFAULT_N_BOOT
from console.analysis.comparison.capacity_stage import capacity_stage
from console.analysis.comparison.cdf import latency_cdf, slice_cdf
from console.analysis.comparison.derive import baseline_resolve, derive
from console.analysis.comparison.environment import environment_check, environment_notes
from console.analysis.comparison.kv import kv_rows
from console.analysis.comparison.memory_sources import memory_sources
from console.analysis.comparison.noise import baseline_stability, noise_floors
from console.analysis.comparison.paired import paired_stage, primary_holm
from console.analysis.comparison.quality_stage import correctness_stage, divergence_rows, quality_section
from console.analysis.comparison.records import records
from console.analysis.comparison.rows import Correctness
from console.analysis.comparison.schema import SCHEMA_VERSION, comparison_load
from console.analysis.comparison.spec import (
    METRIC_COLUMNS,
    SLICE_METRIC_COLUMNS,
    STABILITY_STATS,
    slice_intervals,
)
from console.analysis.comparison.speculation import speculation_notes, speculation_rows
from console.analysis.cost import COST_BASIS, class_goodput
from console.analysis.quality_pairs import first_divergences, quality_counts, quality_regressions
from console.analysis.slices import slice_dimensions
from console.experiments.endpoints import HEADLINE_STATS, Endpoints, endpoints_resolve
from console.jsonutil import json_safe

HEAVY_COLUMNS = ["chunk_times", "chunk_tokens", "output_token_ids", "output_text", "drafted", "accepted", "spec_totals"]
# A run the caller measured less of: one accelerator, no energy or utilisation sampled, no
# server counters (each run's row in "runs" carries them).
RUN_DEFAULTS = (("accelerator_count", 1), ("energy_j", np.nan), ("mean_util", np.nan), ("spec_counters", None))


def inference_stages(
    derived: pd.DataFrame,
    *,
    base_arm: str,
    endpoints: Endpoints,
    sweeps: Mapping[str, Mapping[str, int]] | None,
    n_boot: int,
    seed: int,
    ci: float,
) -> dict[str, Any]:
    """Stages 3 and 4 on a derived per-request frame (``load``, ``arm``, ``request_id``,
    ``repeat``, the metric columns of ``spec.METRIC_COLUMNS`` and the slice dimensions): the noise
    floors, the baseline's stability, the paired comparisons with the primary endpoints
    Holm-corrected. ``calibrate`` runs exactly this on simulated experiments."""
    notes: list[str] = []
    dims = slice_dimensions(derived)
    base_rows = derived[derived["arm"] == base_arm]
    floor_frame = base_rows[["load", "request_id", "repeat", *dims]].copy()
    for m, col in (METRIC_COLUMNS | SLICE_METRIC_COLUMNS).items():
        if col in base_rows:
            floor_frame[m] = base_rows[col].to_numpy(dtype=float)
    floors = noise_floors(floor_frame, stats=HEADLINE_STATS)
    for dim in dims:
        # A slice-only metric the frame lacks (a simulated experiment has no runs) is skipped.
        spec = {m: st for m, st in slice_intervals(dim).items() if m in floor_frame}
        dim_floors = noise_floors(floor_frame, stats=spec, slice_dimensions=(dim,))
        floors += [f for f in dim_floors if f["dimension"] == dim]
    stability = baseline_stability(
        floor_frame, stats=STABILITY_STATS, alpha=endpoints["alpha"], n_boot=n_boot, seed=seed, ci=ci
    )
    if all(f["n_repeat_pairs"] == 0 for f in floors):
        notes.append("no noise floor: the baseline needs at least two repeats at a load")
    if stability["stable"] is False:
        notes.append(stability["message"] or "baseline unstable")
    paired = paired_stage(
        derived, base_arm=base_arm, floors=floors, sweeps=sweeps, endpoints=endpoints, n_boot=n_boot, seed=seed, ci=ci
    )
    notes += paired["notes"]
    primary = primary_holm(paired["slice_deltas"], endpoints=endpoints)
    return {"floors": floors, "stability": stability, "paired": paired, "primary": primary, "notes": notes}


def comparison_compute(
    requests: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    deadlines: Mapping[str, Mapping[str, float]] | None,
    cost_per_hour_usd: float,
    power_price_usd_per_kwh: float | None = None,
    baseline_arm: str | None = None,
    sweeps: Mapping[str, Mapping[str, int]] | None = None,
    endpoints: Mapping[str, Any] | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    ci: float = 0.95,
    max_regressions: int = 1000,
    speculative_arms: Collection[str] | None = None,
    max_divergences: int = 200,
    references: Mapping[str, Mapping[str, Any] | None] | None = None,
    capacity_search: Mapping[str, Any] | None = None,
    capacity_requests: pd.DataFrame | None = None,
    capacity_runs: pd.DataFrame | None = None,
    arm_order: Collection[str] | None = None,
    speculative_configs: Mapping[str, Mapping[str, Any] | None] | None = None,
    run_environments: Mapping[int, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The stored comparison of an experiment as JSON, validated through
    :class:`.schema.Comparison` (see there for every field and unit): a stage that builds another
    shape raises :class:`.schema.ComparisonSchemaError` here.

    ``requests`` and ``runs`` follow the contract in ``console.analysis.metrics``. ``deadlines``
    per traffic class (seconds); ``cost_per_hour_usd`` per accelerator-hour;
    ``power_price_usd_per_kwh`` optional; ``baseline_arm`` defaults to the ``is_baseline`` arm;
    ``sweeps`` maps a sweep name to ``{arm: draft length k}`` (the baseline joins every sweep as
    k = 0); ``endpoints`` the experiment's declared endpoints (``console.experiments.endpoints.DEFAULT_ENDPOINTS``).
    Bootstrap: ``n_boot`` replicates drawing request ids, ``seed``, two-sided level ``ci``.
    ``speculative_arms`` names the arms configured to speculate (None: unknown, nothing is
    flagged); ``runs`` may carry ``spec_counters``, each run's server counter deltas.
    ``max_regressions`` and ``max_divergences`` cap the example lists (the counts stay complete).
    ``references`` maps a request id to its grading reference (``grading.reference_of``); a
    request without one is not gradable.
    ``capacity_requests`` and ``capacity_runs``: the capacity-search steps (with a
    ``capacity_step`` column), kept out of ``requests``; with ``capacity_search`` (the
    experiment's option) they give the ``capacity`` section (:mod:`.capacity_stage`) and the cost
    basis ``"capacity"``; ``arm_order`` orders its arms. ``speculative_configs`` maps an arm to
    its ``speculative_config`` (the draft-length check); ``run_environments`` a run id to its
    recorded ``{"hardware", "versions"}`` (the ``environment`` section; None: not checked).

    Long because: its twenty options are the public contract, each said here (signature and
    docstring are half its lines); the body only calls the stages in order, each one call.
    """
    ends = endpoints_resolve(endpoints)
    base_arm = baseline_resolve(requests, baseline_arm)
    derived, gaps, steps, request_steps = derive(
        requests, base_arm=base_arm, deadlines=deadlines, references=references
    )
    # CDF series in the order the arm x load groups first appear in the input
    first_seen = requests[["arm", "load"]].drop_duplicates()
    cdf = latency_cdf(derived, groups=list(zip(first_seen["arm"], first_seen["load"], strict=True)))
    # The list and text columns are flattened or checked now; dropping them keeps the many
    # frame copies below cheap (quality counts need the outputs first).
    quality_count_frame, divergences, correctness = _output_checks(
        derived, base_arm, n_boot=n_boot, seed=seed, ci=ci, max_regressions=max_regressions, max_divergences=max_divergences
    )
    derived, runs = _slim(derived, runs, base_arm=base_arm)
    dims = slice_dimensions(derived)
    costs = run_costs_frame(
        runs, derived, cost_per_hour_usd=cost_per_hour_usd, power_price_usd_per_kwh=power_price_usd_per_kwh
    )
    agg = Aggregator(derived=derived, runs=runs, request_steps=request_steps, gaps=gaps)
    regressions = quality_regressions(derived, baseline_arm=base_arm)
    tables = aggregates_stage(agg, costs, base_arm=base_arm, regressions=regressions, dims=dims)
    inferred = inference_stages(
        derived, base_arm=base_arm, endpoints=ends, sweeps=sweeps, n_boot=n_boot, seed=seed, ci=ci
    )
    speculation = speculation_rows(
        request_steps=request_steps,
        derived=derived,
        runs=runs,
        base_arm=base_arm,
        speculative_arms=speculative_arms,
        steps=steps,
        speculative_configs=speculative_configs,
    )
    environment = None if run_environments is None else environment_check(run_environments=run_environments, runs=runs)
    notes = [*inferred["notes"], *speculation_notes(speculation), *environment_notes(environment or {})]
    quality = quality_section(
        counts=quality_count_frame,
        regressions=regressions,
        max_regressions=max_regressions,
        divergence=divergence_rows(derived, base_arm=base_arm),
        first_divergences=divergences,
    )
    capacity = _searched_capacity(
        capacity_search, capacity_requests, capacity_runs, base_arm, deadlines, references, cost_per_hour_usd, arm_order
    )
    if capacity is not None and not any(a["is_baseline"] for a in capacity["arms"]):
        notes.append("capacity: no finished search step of the baseline yet")
    summary = _summary(
        base_arm=base_arm,
        params=_params(deadlines, cost_per_hour_usd, power_price_usd_per_kwh, sweeps, n_boot, seed, ci),
        endpoints=ends,
        tables=tables,
        inferred=inferred,
        derived=derived,
        runs=runs,
        sections={
            "cdf": cdf,
            "acceptance": acceptance_tables(steps, request_steps, derived),
            "speculation": speculation,
            "environment": environment,
            "memory_sources": memory_sources(runs),
            "quality": quality,
            "correctness": correctness,
            "capacity": capacity,
        },
        notes=notes,
    )
    comparison_load(summary)
    return summary


def _output_checks(
    derived: pd.DataFrame,
    base_arm: str,
    *,
    n_boot: int,
    seed: int,
    ci: float,
    max_regressions: int,
    max_divergences: int,
) -> tuple[pd.DataFrame, pd.DataFrame, Correctness]:
    """The checks that read the outputs themselves, before :func:`_slim` drops them: the paired
    quality counts, the first divergences (at most ``max_divergences``) and graded correctness."""
    quality_count_frame = quality_counts(derived, baseline_arm=base_arm)
    divergences = first_divergences(derived, baseline_arm=base_arm, limit=max_divergences)
    correctness = correctness_stage(
        derived, base_arm=base_arm, n_boot=n_boot, seed=seed, ci=ci, max_regressions=max_regressions
    )
    return quality_count_frame, divergences, correctness


def _searched_capacity(
    capacity_search: Mapping[str, Any] | None,
    capacity_requests: pd.DataFrame | None,
    capacity_runs: pd.DataFrame | None,
    base_arm: str,
    deadlines: Mapping[str, Mapping[str, float]] | None,
    references: Mapping[str, Mapping[str, Any] | None] | None,
    cost_per_hour_usd: float,
    arm_order: Collection[str] | None,
) -> dict[str, Any] | None:
    """The ``capacity`` section when the experiment searched capacity and a step has results,
    else None."""
    capacity = None
    if capacity_search and capacity_requests is not None and len(capacity_requests):
        capacity = capacity_section(
            capacity_requests,
            capacity_runs,
            search=capacity_search,
            base_arm=base_arm,
            deadlines=deadlines,
            references=references,
            cost_per_hour_usd=cost_per_hour_usd,
            arm_order=arm_order,
        )
    return capacity


def _params(
    deadlines: Mapping[str, Mapping[str, float]] | None,
    cost_per_hour_usd: float,
    power_price_usd_per_kwh: float | None,
    sweeps: Mapping[str, Mapping[str, int]] | None,
    n_boot: int,
    seed: int,
    ci: float,
) -> dict[str, Any]:
    """The options the comparison was computed with, as stored in its ``params``."""
    return {
        "deadlines": deadlines,
        "cost_per_hour_usd": cost_per_hour_usd,
        "power_price_usd_per_kwh": power_price_usd_per_kwh,
        "sweeps": dict(sweeps or {}),
        "n_boot": n_boot,
        "seed": seed,
        "ci": ci,
        "resampling_unit": "request",
    }


def _slim(derived: pd.DataFrame, runs: pd.DataFrame, *, base_arm: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The derived frame without its list and text columns, with each request's class goodput;
    the runs with the columns a test or an old run may lack."""
    derived = derived.drop(columns=[*HEAVY_COLUMNS, "response_format", "tools"], errors="ignore")
    runs = runs.copy()
    for col, default in RUN_DEFAULTS:
        if col not in runs:
            runs[col] = default
    derived["class_goodput_rps"] = class_goodput(derived, runs, base_arm=base_arm)
    return derived, runs


def _summary(
    *,
    base_arm: str,
    params: dict[str, Any],
    endpoints: Endpoints,
    tables: Tables,
    inferred: Mapping[str, Any],
    derived: pd.DataFrame,
    runs: pd.DataFrame,
    sections: Mapping[str, Any],
    notes: list[str],
) -> dict[str, Any]:
    """The stored comparison, its keys in the order the schema lists them."""
    paired = inferred["paired"]
    dims = slice_dimensions(derived)
    capacity = sections["capacity"]
    return {
        "schema_version": SCHEMA_VERSION,
        "baseline_arm": str(base_arm),
        "params": json_safe(params),
        "endpoints": endpoints,
        "headline": headline_records(tables.headline, paired["headline_deltas"]),
        "primary": json_safe(inferred["primary"]),
        "runs": records(tables.per_run),
        "spread": records(tables.spread),
        "slices": slice_records(tables.slices, paired["slice_deltas"]),
        "slice_dimensions": list(dims),
        "slice_cdf": json_safe(slice_cdf(derived, dims=dims)),
        "cdf": sections["cdf"],
        "acceptance": sections["acceptance"],
        "speculation": sections["speculation"],
        **({"environment": sections["environment"]} if sections["environment"] is not None else {}),
        "memory_sources": sections["memory_sources"],
        "kv": json_safe(kv_rows(runs, base_arm=base_arm)),
        "saturation": tables.saturation,
        "sessions": session_tables(derived),
        "quality": sections["quality"],
        "correctness": sections["correctness"],
        "cost_basis": "capacity" if capacity is not None else COST_BASIS,
        "capacity": capacity,
        "noise_floor": json_safe(inferred["floors"]),
        "baseline_stability": json_safe(inferred["stability"]),
        "knees": json_safe(paired["knees"]),
        "notes": notes,
    }


def capacity_section(
    capacity_requests: pd.DataFrame,
    capacity_runs: pd.DataFrame | None,
    *,
    search: Mapping[str, Any],
    base_arm: str,
    deadlines: Mapping[str, Mapping[str, float]] | None,
    references: Mapping[str, Mapping[str, Any] | None] | None,
    cost_per_hour_usd: float,
    arm_order: Collection[str] | None,
) -> dict[str, Any]:
    """The ``capacity`` section: the capacity-search steps derived like the comparison's own
    requests, then :func:`.capacity_stage.capacity_stage`."""
    cap_derived, *_ = derive(capacity_requests, base_arm=base_arm, deadlines=deadlines, references=references)
    cap_runs = capacity_runs.copy() if capacity_runs is not None else pd.DataFrame(columns=["run_id", "wall_s"])
    if "accelerator_count" not in cap_runs:
        cap_runs["accelerator_count"] = 1
    return json_safe(
        capacity_stage(
            cap_derived,
            cap_runs,
            search=search,
            base_arm=base_arm,
            cost_per_hour_usd=cost_per_hour_usd,
            arm_order=list(arm_order or []),
        )
    )


def headline_records(headline: pd.DataFrame, headline_deltas: Mapping[tuple[str, str], list]) -> list[dict]:
    """The headline rows as records, each with its paired ``deltas``."""
    rows = records(headline)
    for hrow in rows:
        hrow["deltas"] = json_safe(headline_deltas.get((hrow["arm"], hrow["load"]), []))
    return rows


def slice_records(slices_out: pd.DataFrame, slice_deltas: Mapping[tuple[str, str, str, Any], list]) -> list[dict]:
    """The slice rows as records, each with its paired ``deltas`` and a flat copy of every
    delta and bound (``{metric}_{stat}_delta`` ...)."""
    rows = records(slices_out)
    for srow in rows:
        key = (srow["arm"], srow["load"], srow["dimension"], srow["value"])
        srow["deltas"] = json_safe(slice_deltas.get(key, []))
        for d in srow["deltas"]:
            # Flat copies for tables that read one cell per metric and statistic.
            for field in ("delta", "delta_lo", "delta_hi"):
                srow[f"{d['metric']}_{d['stat']}_{field}"] = d[field]
    return rows
