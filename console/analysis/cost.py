"""Busy time, accelerator-hours and cost per run, cost per successful task, and each request's
share of its class's goodput (definitions in :mod:`console.analysis.metrics`). Seconds, hours,
USD, joules, requests/s."""

from __future__ import annotations

import numpy as np
import pandas as pd

from console.analysis.metrics import request_success

# What accelerator-hours are measured on (stored in the comparison as ``cost_basis``): the busy
# time of each run, see :mod:`console.analysis.metrics`. A capacity search may add "capacity".
COST_BASIS = "busy_time"


def busy_seconds(requests: pd.DataFrame) -> pd.Series:
    """Busy time per run (seconds, indexed by ``run_id``): the length of the union of the
    intervals [``sent_s``, end] of the run's requests, end = ``finish_s`` (or ``first_token_s``
    where no finish time was stored). Overlapping requests count once, gaps with nothing in flight
    not at all; a request never sent, or with no end, or ending before it was sent, adds nothing.
    A failed request counts until it ended: the engine worked on it until then. A run whose
    requests add nothing has 0.0."""
    sent = requests["sent_s"].to_numpy(dtype=float)
    end = np.fmax(requests["finish_s"].to_numpy(dtype=float), requests["first_token_s"].to_numpy(dtype=float))
    run_ids = requests["run_id"].to_numpy()
    keep = np.isfinite(sent) & np.isfinite(end) & (end > sent)
    out = pd.Series(0.0, index=pd.Index(pd.unique(run_ids), name="run_id"), dtype=float)
    if not keep.any():
        return out
    frame = pd.DataFrame({"run_id": run_ids[keep], "start": sent[keep], "end": end[keep]})
    frame = frame.sort_values(["run_id", "start"], kind="stable")
    # A new busy period starts where a request begins after every earlier one of its run ended.
    reach = frame.groupby("run_id", sort=False)["end"].cummax()
    prev_reach = reach.groupby(frame["run_id"], sort=False).shift()
    period = (~(frame["start"] <= prev_reach)).cumsum()
    spans = frame.groupby(period).agg(run_id=("run_id", "first"), start=("start", "min"), end=("end", "max"))
    totals = (spans["end"] - spans["start"]).groupby(spans["run_id"]).sum()
    out.loc[totals.index] = totals.to_numpy(dtype=float)
    return out


def run_costs(
    runs: pd.DataFrame,
    derived: pd.DataFrame,
    *,
    cost_per_hour_usd: float,
    power_price_usd_per_kwh: float | None = None,
) -> pd.DataFrame:
    """Resources and cost per run (one row per row of ``runs``).

    ``derived`` needs ``sent_s``, ``first_token_s``, ``finish_s``, ``completed``,
    ``met_deadline``, ``output_tokens`` and optionally ``output_valid`` (missing = valid). Adds
    ``busy_s`` (s, :func:`busy_seconds`; 0 for a run without requests), ``accelerator_hours``
    (h, on busy time, never ``wall_s``: see :mod:`console.analysis.metrics`), ``energy_kwh``, ``cost_usd``
    (USD), ``energy_cost_included`` (bool), ``successes``, ``output_tokens``, ``n_requests``.
    """
    out = runs.copy()
    count = out["accelerator_count"].fillna(1) if "accelerator_count" in out else 1
    out["busy_s"] = out["run_id"].map(busy_seconds(derived)).fillna(0.0).astype(float)
    out["accelerator_hours"] = out["busy_s"] / 3600.0 * count
    energy = out["energy_j"].astype(float) if "energy_j" in out else pd.Series(np.nan, index=out.index)
    out["energy_kwh"] = energy / 3.6e6
    out["cost_usd"] = out["accelerator_hours"] * float(cost_per_hour_usd)
    use_energy = np.isfinite(energy.to_numpy()) & (power_price_usd_per_kwh is not None)
    out["energy_cost_included"] = use_energy
    if power_price_usd_per_kwh is not None:
        out.loc[use_energy, "cost_usd"] += out.loc[use_energy, "energy_kwh"] * float(power_price_usd_per_kwh)
    success = request_success(derived)
    per_run = pd.DataFrame(
        {"run_id": derived["run_id"], "success": success, "output_tokens": derived["output_tokens"]}
    ).groupby("run_id")
    out["successes"] = out["run_id"].map(per_run["success"].sum()).fillna(0).astype(np.int64)
    out["output_tokens"] = out["run_id"].map(per_run["output_tokens"].sum()).fillna(0).astype(np.int64)
    out["n_requests"] = out["run_id"].map(per_run.size()).fillna(0).astype(np.int64)
    return out


def class_goodput(derived: pd.DataFrame, runs: pd.DataFrame, *, base_arm: str) -> np.ndarray:
    """Per request, its share of its traffic class's goodput (requests/s): ``met_deadline`` x the
    class's requests in the request's run / the **baseline's** ``wall_s`` at the same load and
    repeat. Its mean over a class's requests in one run is that class's goodput over the
    baseline's run time, so a paired difference says how many more of the class's requests per
    second met their deadline, with the offered load and the duration held fixed: the bootstrap
    that resamples requests varies which requests met it. A candidate whose last request merely
    finishes earlier (a shorter run, the same requests on time) is not credited with goodput.
    NaN where the baseline has no wall time at that load and repeat."""
    base_runs = runs[runs["arm"] == base_arm]
    base_wall = base_runs.groupby(["load", "repeat"])["wall_s"].sum(min_count=1).astype(float)
    keys = pd.MultiIndex.from_frame(derived[["load", "repeat"]])
    wall = base_wall.reindex(keys).to_numpy(dtype=float)
    n_class = derived.groupby(["run_id", "traffic_class"], sort=False)["run_id"].transform("size").to_numpy(float)
    met = derived["met_deadline"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = met * n_class / wall
    out[~(wall > 0)] = np.nan
    return out


def cost_per_success(cost_usd: float, successes: int, output_tokens: int) -> dict[str, float | str | None]:
    """``cost_per_success_usd`` (USD per successful request) and
    ``cost_per_million_output_tokens_usd``; inf with a ``*_reason`` when the denominator is 0."""
    out: dict[str, float | str | None] = {
        "cost_usd": float(cost_usd),
        "successes": int(successes),
        "output_tokens": int(output_tokens),
    }
    if successes > 0:
        out["cost_per_success_usd"] = float(cost_usd) / successes
        out["cost_per_success_reason"] = None
    else:
        out["cost_per_success_usd"] = float("inf")
        out["cost_per_success_reason"] = "no successful requests"
    if output_tokens > 0:
        out["cost_per_million_output_tokens_usd"] = float(cost_usd) / output_tokens * 1e6
        out["cost_per_million_output_tokens_reason"] = None
    else:
        out["cost_per_million_output_tokens_usd"] = float("inf")
        out["cost_per_million_output_tokens_reason"] = "no output tokens"
    return out
