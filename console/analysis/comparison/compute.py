"""``comparison_compute``: the one entry point that turns per-request results into the stored
comparison (schema in :mod:`console.analysis.comparison.schema`), stage by stage:

1. derive per-request metrics, slices, quality flags and success (``console.analysis.metrics``,
   ``slices``, ``quality``);
2. aggregate per run, per arm x load and per slice, with acceptance and costs;
3. the noise floor and the baseline's stability (:mod:`.noise`);
4. paired, request-clustered comparisons per load (:mod:`.paired`), the primary endpoints with
   Holm's correction, and the knees (:mod:`.knee`);
5. quality counts and regressions, acceptance tables, and whether each speculative candidate
   drafted at all (:mod:`.speculation`).

Pure numpy/pandas; no Django.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd

from console.analysis.comparison.bootstrap import DEFAULT_N_BOOT
from console.analysis.comparison.capacity import capacity_stage
from console.analysis.comparison.kv import kv_rows
from console.analysis.comparison.noise import baseline_stability, noise_floors
from console.analysis.comparison.paired import paired_stage, primary_holm
from console.analysis.comparison.records import records
from console.analysis.comparison.schema import SCHEMA_VERSION, Correctness, Endpoints, Summary
from console.analysis.comparison.spec import (
    HEADLINE_STATS,
    METRIC_COLUMNS,
    RUN_SPREAD_COLUMNS,
    SLICE_METRIC_COLUMNS,
    SLICE_POINT_COLUMNS,
    STABILITY_STATS,
    endpoints_resolve,
    slice_intervals,
)
from console.analysis.comparison.speculation import speculation_rows
from console.jsonutil import json_safe


def run_spread(per_run: pd.DataFrame, *, columns: list[str], by: tuple[str, ...] = ("arm", "load")) -> pd.DataFrame:
    """Run-to-run spread across repeats: one row per group and column with ``n_runs``, ``mean``,
    ``std`` (sample, ddof=1; NaN for one run), ``min``, ``max`` (in the column's unit)."""
    long = per_run.melt(id_vars=list(by), value_vars=list(columns), var_name="metric", value_name="value")
    return (
        long.groupby([*by, "metric"], sort=True)["value"]
        .agg(n_runs="count", mean="mean", std="std", min="min", max="max")
        .reset_index()
    )


def _resolve_baseline(requests: pd.DataFrame, baseline_arm: str | None) -> str:
    if baseline_arm is not None:
        if not (requests["arm"] == baseline_arm).any():
            raise ValueError(f"baseline arm {baseline_arm!r} has no requests")
        return baseline_arm
    arms = requests.loc[requests["is_baseline"].astype(bool), "arm"].unique()
    if len(arms) != 1:
        raise ValueError(f"expected exactly one baseline arm, found {list(arms)}")
    return str(arms[0])


def _cost_rows(costs: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    grouped = costs.groupby(list(by), sort=True)
    out = grouped.agg(
        busy_s=("busy_s", "sum"),
        accelerator_hours=("accelerator_hours", "sum"),
        cost_usd=("cost_usd", "sum"),
        successes=("successes", "sum"),
        cost_output_tokens=("cost_output_tokens", "sum"),
        peak_memory_bytes=("peak_memory_bytes", "max"),
        mean_util=("mean_util", "mean"),
        energy_cost_included=("energy_cost_included", "all"),
    )
    # Energy only when every run measured it: a partial sum would understate it.
    out["energy_j"] = grouped["energy_j"].sum(min_count=1).where(grouped["energy_j"].count() == grouped.size())
    return out.reset_index()


def _cost_columns(rows: pd.DataFrame) -> pd.DataFrame:
    from console.analysis.metrics import cost_per_success

    extra = [
        cost_per_success(c, int(s), int(t))
        for c, s, t in zip(rows["cost_usd"], rows["successes"], rows["cost_output_tokens"], strict=True)
    ]
    cols = [
        "cost_per_success_usd",
        "cost_per_success_reason",
        "cost_per_million_output_tokens_usd",
        "cost_per_million_output_tokens_reason",
    ]
    rows = rows.copy()
    for c in cols:
        rows[c] = [e[c] for e in extra]
    return rows


CDF_POINTS = 101


def latency_cdf(derived: pd.DataFrame, *, groups: list[tuple[Any, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Quantiles (0..100 %) of TTFT, TPOT and e2e per arm x load, enough to draw CDFs without
    keeping every request on the page: ``{metric: [{arm, load, x, y}]}``, seconds, the series in
    the order of ``groups`` ((arm, load) pairs)."""
    if derived.empty:
        return {}
    qs = np.linspace(0, 1, CDF_POINTS)
    by_group = {key: frame for key, frame in derived.groupby(["arm", "load"], sort=False)}
    out: dict[str, list[dict[str, Any]]] = {}
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        series = []
        for arm, load in groups:
            group = by_group.get((arm, load))
            values = group[metric].dropna().to_numpy(dtype=float) if group is not None else np.empty(0)
            if values.size:
                series.append(
                    {"arm": arm, "load": load, "x": np.quantile(values, qs).tolist(), "y": qs.tolist()}
                )
        out[metric] = series
    return out


SLICE_CDF_QUANTILES = np.linspace(0, 1, 41)
SLICE_CDF_METRICS: tuple[str, ...] = ("ttft_s", "e2e_s")


def slice_cdf(derived: pd.DataFrame, *, dims: tuple[str, ...]) -> dict[str, Any]:
    """Quantiles of TTFT and e2e (seconds) per slice x arm x load, enough to draw a slice's
    latency CDFs: ``{"q": [0..1], "series": [{dimension, value, metric, arm, load, x}]}`` with
    ``x[i]`` the ``q[i]`` quantile. Coarser than the whole experiment's CDF (41 points) to keep
    the stored comparison small."""
    series: list[dict[str, Any]] = []
    for dim in dims:
        for (value, arm, load), group in derived.groupby([dim, "arm", "load"], sort=True):
            for metric in SLICE_CDF_METRICS:
                values = group[metric].to_numpy(dtype=float)
                values = values[np.isfinite(values)]
                if values.size:
                    x = np.quantile(values, SLICE_CDF_QUANTILES).tolist()
                    series.append({"dimension": dim, "value": value, "metric": metric, "arm": arm, "load": load, "x": x})
    return {"q": SLICE_CDF_QUANTILES.tolist(), "series": series}


def derive(
    requests: pd.DataFrame,
    *,
    base_arm: str,
    deadlines: Mapping[str, Mapping[str, float]] | None,
    references: Mapping[str, Mapping[str, Any] | None] | None = None,
):
    """Stage 1: per-request metrics, slices, quality flags, exact match, graded correctness
    (``console.analysis.grading``; ``references`` by request id) and success; the pooled gaps and
    the verification steps. Returns ``(derived, gaps, steps, request_steps)``."""
    from console.analysis.grading import correctness_flags
    from console.analysis.metrics import (
        chunk_times_flatten,
        gaps_flatten,
        request_success,
        request_totals_merge,
        requests_derive,
        session_columns,
        steps_flatten,
        steps_per_request,
    )
    from console.analysis.quality import STORED_COLUMNS, exact_match, quality_flags
    from console.analysis.slices import slices_assign

    # Rows grouped by arm, load and run: every grouping below then finds its rows contiguous.
    req = requests.sort_values(["arm", "load", "repeat", "run_id"], kind="stable").reset_index(drop=True)
    chunk_flat = chunk_times_flatten(req)
    derived = requests_derive(req, deadlines=deadlines, chunk_times_flat=chunk_flat)
    derived = session_columns(slices_assign(derived, baseline_arm=base_arm))  # turn 0 where single-turn
    flags = quality_flags(derived)
    stored = [c for names in STORED_COLUMNS.values() for c in names]
    derived = derived.drop(columns=[*stored, "output_valid", "quality_reason"], errors="ignore")
    derived = pd.concat([derived, flags, exact_match(derived, baseline_arm=base_arm)], axis=1)
    derived = pd.concat([derived, correctness_flags(derived, references)], axis=1)
    derived["success"] = request_success(derived).astype(float)
    derived["met_deadline_f"] = derived["met_deadline"].astype(float)
    gaps = gaps_flatten(derived, chunk_times_flat=chunk_flat)
    steps = steps_flatten(derived)
    request_steps = request_totals_merge(steps_per_request(steps, n_rows=len(derived)), derived)
    return derived, gaps, steps, request_steps


def correctness_stage(
    derived: pd.DataFrame, *, base_arm: str, n_boot: int, seed: int, ci: float, max_regressions: int
) -> Correctness:
    """Stage 5b: graded correctness per arm x load x task with request-clustered intervals, the
    paired counts (check ``"correct"``) that feed the gate's quality criterion, the regressions."""
    from console.analysis.grading import correctness_counts, correctness_rates, correctness_regressions

    gradable = derived[derived["gradable"].to_numpy(dtype=bool)]
    regressions = correctness_regressions(gradable, baseline_arm=base_arm)
    return {
        "rates": json_safe(records(correctness_rates(gradable, n_boot=n_boot, seed=seed, ci=ci))),
        "counts": json_safe(records(correctness_counts(derived, baseline_arm=base_arm))),
        "regressions": json_safe(records(regressions.head(max_regressions))),
        "n_regressions": len(regressions),
        "n_gradable": int(len(gradable)),
        "n_not_gradable": int(len(derived) - len(gradable)),
    }


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
    from console.analysis.slices import slice_dimensions

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
) -> Summary:
    """The stored comparison of an experiment (see :mod:`.schema` for every field and unit).

    ``requests`` and ``runs`` follow the contract in ``console.analysis.metrics``. ``deadlines``
    per traffic class (seconds); ``cost_per_hour_usd`` per accelerator-hour;
    ``power_price_usd_per_kwh`` optional; ``baseline_arm`` defaults to the ``is_baseline`` arm;
    ``sweeps`` maps a sweep name to ``{arm: draft length k}`` (the baseline joins every sweep as
    k = 0); ``endpoints`` the experiment's declared endpoints (``spec.DEFAULT_ENDPOINTS``).
    Bootstrap: ``n_boot`` replicates drawing request ids, ``seed``, two-sided level ``ci``.
    ``speculative_arms`` names the arms configured to speculate (None: unknown, nothing is
    flagged); ``runs`` may carry ``spec_counters``, each run's server counter deltas.
    ``max_regressions`` and ``max_divergences`` cap the example lists (the counts stay complete).
    ``references`` maps a request id to its grading reference (``grading.reference_of``); a
    request without one is not gradable.
    ``capacity_requests`` and ``capacity_runs``: the capacity-search steps (with a
    ``capacity_step`` column), kept out of ``requests``; with ``capacity_search`` (the
    experiment's option) they give the ``capacity`` section (:mod:`.capacity`) and the cost basis
    ``"capacity"``; ``arm_order`` orders its arms.
    """
    from console.analysis.metrics import (
        COST_BASIS,
        acceptance_aggregate,
        acceptance_by_position,
        class_goodput,
        group_codes,
        metrics_aggregate,
        run_costs,
        sessions_aggregate,
        tokens_per_pass,
        turns_aggregate,
    )
    from console.analysis.quality import first_divergences, quality_counts, quality_rates, quality_regressions
    from console.analysis.slices import slice_dimensions

    ends = endpoints_resolve(endpoints)
    notes: list[str] = []
    base_arm = _resolve_baseline(requests, baseline_arm)
    derived, gaps, steps, request_steps = derive(
        requests, base_arm=base_arm, deadlines=deadlines, references=references
    )
    # CDF series in the order the arm x load groups first appear in the input
    first_seen = requests[["arm", "load"]].drop_duplicates()
    cdf = latency_cdf(derived, groups=list(zip(first_seen["arm"], first_seen["load"], strict=True)))
    # The list and text columns are flattened or checked now; dropping them keeps the many
    # frame copies below cheap (quality counts need the outputs first).
    quality_count_frame = quality_counts(derived, baseline_arm=base_arm)
    divergences = first_divergences(derived, baseline_arm=base_arm, limit=max_divergences)
    correctness = correctness_stage(
        derived, base_arm=base_arm, n_boot=n_boot, seed=seed, ci=ci, max_regressions=max_regressions
    )
    heavy = ["chunk_times", "chunk_tokens", "output_token_ids", "output_text", "drafted", "accepted", "spec_totals"]
    derived = derived.drop(columns=[*heavy, "response_format", "tools"], errors="ignore")
    runs = runs.copy()
    for col, default in (("accelerator_count", 1), ("energy_j", np.nan), ("mean_util", np.nan)):
        if col not in runs:
            runs[col] = default
    derived["class_goodput_rps"] = class_goodput(derived, runs, base_arm=base_arm)
    dims = slice_dimensions(derived)
    costs = run_costs(
        runs, derived, cost_per_hour_usd=cost_per_hour_usd, power_price_usd_per_kwh=power_price_usd_per_kwh
    )
    costs = costs.rename(columns={"output_tokens": "cost_output_tokens"}).drop(columns=["n_requests"])

    def with_extras(agg: pd.DataFrame, by: list[str]) -> pd.DataFrame:
        acc = acceptance_aggregate(request_steps, derived, by=by)
        tpp = tokens_per_pass(request_steps, derived, by=by)
        qual = quality_rates(derived, by=by)
        codes, success = group_codes(derived, by)
        success["success_mean"] = np.bincount(codes, weights=derived["success"].to_numpy()) / np.bincount(codes)
        out = agg.merge(acc, on=by, how="left").merge(tpp, on=by, how="left")
        out = out.merge(qual.drop(columns=["n_requests"]), on=by, how="left").merge(success, on=by, how="left")
        for col in ("steps", "drafted", "accepted", "drafts"):
            out[col] = out[col].fillna(0).astype(np.int64)
        return out

    # Stage 2: aggregates per run, per arm x load, per slice.
    run_by = ["arm", "load", "repeat", "run_id"]
    per_run = with_extras(metrics_aggregate(derived, runs, by=run_by, gaps=gaps), run_by)
    per_run = per_run.drop(columns=["wall_s"]).merge(
        costs.drop(columns=["arm", "load", "repeat"], errors="ignore"), on="run_id", how="left"
    )
    per_run = _cost_columns(per_run).drop(columns=["cost_output_tokens"])
    run_keys = derived.drop_duplicates("run_id").set_index("run_id")[["arm", "load", "repeat"]]
    headline = with_extras(metrics_aggregate(derived, runs, by=["arm", "load"], gaps=gaps), ["arm", "load"])
    cost_by_run = costs.drop(columns=["arm", "load", "repeat"], errors="ignore").merge(
        run_keys.reset_index(), on="run_id"
    )
    headline = _cost_columns(headline.merge(_cost_rows(cost_by_run, ["arm", "load"]), on=["arm", "load"], how="left"))
    headline["is_baseline"] = headline["arm"] == base_arm
    headline = headline.drop(columns=["cost_output_tokens"])
    regressions = quality_regressions(derived, baseline_arm=base_arm)
    n_reg = regressions.groupby(["arm", "load"]).size().rename("n_regressions").reset_index()
    headline = headline.merge(n_reg, on=["arm", "load"], how="left")
    headline["n_regressions"] = headline["n_regressions"].fillna(0).astype(np.int64)
    spread = run_spread(per_run, columns=[c for c in RUN_SPREAD_COLUMNS if c in per_run])
    slice_frames = {
        dim: with_extras(metrics_aggregate(derived, runs, by=["arm", "load", dim]), ["arm", "load", dim])
        for dim in dims
    }

    # Stages 3 and 4: the noise floor, the baseline's stability, the paired comparisons.
    inferred = inference_stages(
        derived, base_arm=base_arm, endpoints=ends, sweeps=sweeps, n_boot=n_boot, seed=seed, ci=ci
    )
    floors, stability, paired, primary = (
        inferred["floors"],
        inferred["stability"],
        inferred["paired"],
        inferred["primary"],
    )
    notes += inferred["notes"]

    # Slice rows with point deltas against the baseline's slice, and their paired comparisons.
    slice_rows = []
    for dim, frame in slice_frames.items():
        frame = frame.rename(columns={dim: "value"})
        frame.insert(0, "dimension", dim)
        base = frame[frame["arm"] == base_arm].set_index(["load", "value"])
        idx = pd.MultiIndex.from_frame(frame[["load", "value"]])
        for col in SLICE_POINT_COLUMNS:
            frame[f"{col}_delta"] = frame[col].to_numpy() - base[col].reindex(idx).to_numpy()
        slice_rows.append(frame)
    slices_out = pd.concat(slice_rows, ignore_index=True) if slice_rows else pd.DataFrame()

    acceptance = {
        "by_task": records(acceptance_aggregate(request_steps, derived, by=["arm", "load", "task"])),
        "by_traffic_class": records(acceptance_aggregate(request_steps, derived, by=["arm", "load", "traffic_class"])),
        "by_position": records(acceptance_by_position(steps, derived, by=["arm", "load"])),
        "by_task_position": records(acceptance_by_position(steps, derived, by=["arm", "load", "task"])),
        "by_output_position": records(acceptance_aggregate(steps, derived, by=["arm", "load", "position_bucket"])),
        "by_task_output_position": records(
            acceptance_aggregate(steps, derived, by=["arm", "load", "task", "position_bucket"])
        ),
    }

    speculation = speculation_rows(
        request_steps=request_steps, derived=derived, runs=runs, base_arm=base_arm, speculative_arms=speculative_arms
    )
    notes += [row["reason"] for row in speculation if row["did_not_speculate"]]
    sessions = {
        "by_arm_load": records(sessions_aggregate(derived, by=["arm", "load"])),
        "by_turn": records(turns_aggregate(derived, by=["arm", "load"])),
    }

    cands = derived[derived["arm"] != base_arm]
    compared = cands[cands["exact_match"].notna()]
    divergence = (
        compared.assign(diverged=~compared["exact_match"].astype(bool))
        .groupby(["arm", "load"])
        .agg(
            n_compared=("diverged", "size"),
            n_diverged=("diverged", "sum"),
            first_divergence_p50=(
                "first_divergence",
                lambda s: float(s.dropna().median()) if s.notna().any() else np.nan,
            ),
        )
        .reset_index()
    )

    capacity = None
    if capacity_search and capacity_requests is not None and len(capacity_requests):
        cap_derived, *_ = derive(capacity_requests, base_arm=base_arm, deadlines=deadlines, references=references)
        cap_runs = capacity_runs.copy() if capacity_runs is not None else pd.DataFrame(columns=["run_id", "wall_s"])
        if "accelerator_count" not in cap_runs:
            cap_runs["accelerator_count"] = 1
        capacity = json_safe(
            capacity_stage(
                cap_derived,
                cap_runs,
                search=capacity_search,
                base_arm=base_arm,
                cost_per_hour_usd=cost_per_hour_usd,
                arm_order=list(arm_order or []),
            )
        )
        if not any(a["is_baseline"] for a in capacity["arms"]):
            notes.append("capacity: no finished search step of the baseline yet")

    headline_rows = records(headline)
    for hrow in headline_rows:
        hrow["deltas"] = json_safe(paired["headline_deltas"].get((hrow["arm"], hrow["load"]), []))
    slice_records = records(slices_out)
    for srow in slice_records:
        key = (srow["arm"], srow["load"], srow["dimension"], srow["value"])
        srow["deltas"] = json_safe(paired["slice_deltas"].get(key, []))
        for d in srow["deltas"]:
            # Flat copies for tables that read one cell per metric and statistic.
            for field in ("delta", "delta_lo", "delta_hi"):
                srow[f"{d['metric']}_{d['stat']}_{field}"] = d[field]
    summary: Summary = {
        "schema_version": SCHEMA_VERSION,
        "baseline_arm": str(base_arm),
        "params": json_safe(
            {
                "deadlines": deadlines,
                "cost_per_hour_usd": cost_per_hour_usd,
                "power_price_usd_per_kwh": power_price_usd_per_kwh,
                "sweeps": dict(sweeps or {}),
                "n_boot": n_boot,
                "seed": seed,
                "ci": ci,
                "resampling_unit": "request",
            }
        ),
        "endpoints": ends,
        "headline": headline_rows,
        "primary": json_safe(primary),
        "runs": records(per_run),
        "spread": records(spread),
        "slices": slice_records,
        "slice_dimensions": list(dims),
        "slice_cdf": json_safe(slice_cdf(derived, dims=dims)),
        "cdf": cdf,
        "acceptance": acceptance,
        "speculation": speculation,
        "kv": json_safe(kv_rows(runs, base_arm=base_arm)),
        "sessions": sessions,
        "quality": {
            "counts": records(quality_count_frame),
            "regressions": records(regressions.head(max_regressions)),
            "n_regressions": len(regressions),
            "truncated": len(regressions) > max_regressions,
            "divergence": records(divergence),
            "first_divergences": records(divergences),
        },
        "correctness": correctness,
        "cost_basis": "capacity" if capacity is not None else COST_BASIS,
        "capacity": capacity,
        "noise_floor": json_safe(floors),
        "baseline_stability": json_safe(stability),
        "knees": json_safe(paired["knees"]),
        "notes": notes,
    }
    return summary
