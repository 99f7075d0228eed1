"""Stage 2 of the comparison: aggregates per run, per arm x load and per slice, with acceptance,
tokens per target pass, quality rates, success and costs; the run-to-run spread; the slice rows'
point deltas against the baseline's slice. Seconds, tokens, USD, joules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from console.analysis.acceptance import acceptance_aggregate, tokens_per_pass
from console.analysis.acceptance_interval import acceptance_interval
from console.analysis.comparison.saturation import SaturationRow, saturation_rows
from console.analysis.comparison.spec import RUN_SPREAD_COLUMNS, SLICE_POINT_COLUMNS
from console.analysis.cost import cost_per_success, run_costs
from console.analysis.latency import metrics_aggregate
from console.analysis.metrics import group_codes
from console.analysis.quality_pairs import quality_rates

RUN_BY = ["arm", "load", "repeat", "run_id"]


def run_spread(per_run: pd.DataFrame, *, columns: list[str], by: tuple[str, ...] = ("arm", "load")) -> pd.DataFrame:
    """Run-to-run spread across repeats: one row per group and column with ``n_runs``, ``mean``,
    ``std`` (sample, ddof=1; NaN for one run), ``min``, ``max`` (in the column's unit)."""
    long = per_run.melt(id_vars=list(by), value_vars=list(columns), var_name="metric", value_name="value")
    return (
        long.groupby([*by, "metric"], sort=True)["value"]
        .agg(n_runs="count", mean="mean", std="std", min="min", max="max")
        .reset_index()
    )


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


def run_costs_frame(
    runs: pd.DataFrame, derived: pd.DataFrame, *, cost_per_hour_usd: float, power_price_usd_per_kwh: float | None
) -> pd.DataFrame:
    """Each run's busy time, accelerator-hours and cost, with its output tokens renamed
    ``cost_output_tokens`` so they never collide with the metric of that name."""
    costs = run_costs(
        runs, derived, cost_per_hour_usd=cost_per_hour_usd, power_price_usd_per_kwh=power_price_usd_per_kwh
    )
    return costs.rename(columns={"output_tokens": "cost_output_tokens"}).drop(columns=["n_requests"])


@dataclass(frozen=True)
class Aggregator:
    """Aggregates a group-by of the derived frame with the columns every table shares."""

    derived: pd.DataFrame
    runs: pd.DataFrame
    request_steps: pd.DataFrame
    gaps: Mapping[str, np.ndarray]

    def with_extras(self, agg: pd.DataFrame, by: list[str]) -> pd.DataFrame:
        """``agg`` joined with acceptance, tokens per pass, quality rates and the success mean."""
        derived = self.derived
        acc = acceptance_aggregate(self.request_steps, derived, by=by)
        tpp = tokens_per_pass(self.request_steps, derived, by=by)
        qual = quality_rates(derived, by=by)
        codes, success = group_codes(derived, by)
        success["success_mean"] = np.bincount(codes, weights=derived["success"].to_numpy()) / np.bincount(codes)
        out = agg.merge(acc, on=by, how="left").merge(tpp, on=by, how="left")
        out = out.merge(qual.drop(columns=["n_requests"]), on=by, how="left").merge(success, on=by, how="left")
        for col in ("steps", "drafted", "accepted", "drafts"):
            out[col] = out[col].fillna(0).astype(np.int64)
        return out

    def table(self, by: list[str], *, with_gaps: bool = True) -> pd.DataFrame:
        gaps = self.gaps if with_gaps else None
        return self.with_extras(metrics_aggregate(self.derived, self.runs, by=by, gaps=gaps), by)


def per_run_rows(agg: Aggregator, costs: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its metrics and its costs."""
    per_run = agg.table(RUN_BY)
    per_run = per_run.drop(columns=["wall_s"]).merge(
        costs.drop(columns=["arm", "load", "repeat"], errors="ignore"), on="run_id", how="left"
    )
    return _cost_columns(per_run).drop(columns=["cost_output_tokens"])


def headline_rows(agg: Aggregator, costs: pd.DataFrame, *, base_arm: str, regressions: pd.DataFrame) -> pd.DataFrame:
    """One row per arm x load: its metrics, its acceptance rate's interval (the request the
    unit), costs summed over its runs, and its number of quality regressions."""
    derived = agg.derived
    run_keys = derived.drop_duplicates("run_id").set_index("run_id")[["arm", "load", "repeat"]]
    headline = agg.table(["arm", "load"])
    headline = headline.merge(
        acceptance_interval(agg.request_steps, derived, by=["arm", "load"]), on=["arm", "load"], how="left"
    )
    cost_by_run = costs.drop(columns=["arm", "load", "repeat"], errors="ignore").merge(
        run_keys.reset_index(), on="run_id"
    )
    headline = _cost_columns(headline.merge(_cost_rows(cost_by_run, ["arm", "load"]), on=["arm", "load"], how="left"))
    headline["is_baseline"] = headline["arm"] == base_arm
    headline = headline.drop(columns=["cost_output_tokens"])
    n_reg = regressions.groupby(["arm", "load"]).size().rename("n_regressions").reset_index()
    headline = headline.merge(n_reg, on=["arm", "load"], how="left")
    headline["n_regressions"] = headline["n_regressions"].fillna(0).astype(np.int64)
    return headline


def spread_rows(per_run: pd.DataFrame) -> pd.DataFrame:
    """The run-to-run spread of the columns of ``spec.RUN_SPREAD_COLUMNS`` a run has."""
    return run_spread(per_run, columns=[c for c in RUN_SPREAD_COLUMNS if c in per_run])


def slice_rows(agg: Aggregator, *, dims: Sequence[str], base_arm: str) -> pd.DataFrame:
    """One row per slice x arm x load, with point deltas against the baseline's slice."""
    slice_frames = {dim: agg.table(["arm", "load", dim], with_gaps=False) for dim in dims}
    rows = []
    for dim, frame in slice_frames.items():
        frame = frame.rename(columns={dim: "value"})
        frame.insert(0, "dimension", dim)
        base = frame[frame["arm"] == base_arm].set_index(["load", "value"])
        idx = pd.MultiIndex.from_frame(frame[["load", "value"]])
        for col in SLICE_POINT_COLUMNS:
            frame[f"{col}_delta"] = frame[col].to_numpy() - base[col].reindex(idx).to_numpy()
        rows.append(frame)
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


@dataclass(frozen=True)
class Tables:
    """Stage 2's output: the per-run, headline (arm x load), spread and slice tables, and
    whether each arm x load was past saturation (:mod:`.saturation`)."""

    per_run: pd.DataFrame
    headline: pd.DataFrame
    spread: pd.DataFrame
    slices: pd.DataFrame
    saturation: list[SaturationRow] = field(default_factory=list)


def aggregates_stage(
    agg: Aggregator, costs: pd.DataFrame, *, base_arm: str, regressions: pd.DataFrame, dims: Sequence[str]
) -> Tables:
    """Stage 2: aggregates per run, per arm x load and per slice (``costs`` from
    :func:`run_costs_frame`; ``regressions`` the quality regressions, counted per arm x load)."""
    per_run = per_run_rows(agg, costs)
    headline = headline_rows(agg, costs, base_arm=base_arm, regressions=regressions)
    spread = spread_rows(per_run)
    return Tables(
        per_run=per_run,
        headline=headline,
        spread=spread,
        slices=slice_rows(agg, dims=dims, base_arm=base_arm),
        saturation=saturation_rows(agg.derived, base_arm=base_arm),
    )
