"""Stage 4: paired, request-clustered comparisons of every candidate with the baseline, per load
(all requests and every slice, all on the same replicates), the knees of draft-length sweeps,
and Holm's correction over the declared primary endpoints.

Pairing: a candidate row is matched with the baseline row of the same request and repeat. The
universe at a load is the baseline's (request, repeat) rows; the bootstrap draws request ids from
it, so every repeat of a drawn request comes along in every arm (``bootstrap.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from console.analysis.comparison.bootstrap import bootstrap_distributions, point_stat, reportable
from console.analysis.comparison.intervals import holm_adjust, paired_delta
from console.analysis.comparison.knee import knee_find
from console.analysis.comparison.rows import DeltaRow, Endpoints, NoiseFloorRow
from console.analysis.comparison.schema import Verdict
from console.analysis.comparison.spec import (
    HEADLINE_STATS,
    HIGHER_IS_BETTER,
    KNEE_METRIC,
    KNEE_STAT,
    METRIC_COLUMNS,
    SLICE_METRIC_COLUMNS,
    slice_intervals,
)
from console.analysis.slices import slice_dimensions


def verdict(
    *,
    measured: bool,
    delta: float,
    delta_lo: float,
    delta_hi: float,
    noise_floor: float | None,
    lower_is_better: bool = True,
) -> Verdict:
    """``"not measured"`` when the comparison was not reported; ``"not distinguishable"`` when
    the interval contains 0 or ``|delta|`` does not exceed the A/A noise floor; otherwise
    ``"better"`` or ``"worse"``. Without a floor (one repeat) only the interval decides: the row
    says ``noise_floor: null`` and the gate treats it as not measured."""
    if not measured or not (np.isfinite(delta) and np.isfinite(delta_lo) and np.isfinite(delta_hi)):
        return "not measured"
    if delta_lo <= 0 <= delta_hi:
        return "not distinguishable"
    if noise_floor is not None and np.isfinite(noise_floor) and abs(delta) <= noise_floor:
        return "not distinguishable"
    improved = delta < 0 if lower_is_better else delta > 0
    return "better" if improved else "worse"


def _distinct(codes: np.ndarray, mask: np.ndarray) -> int:
    """How many distinct codes (requests) the rows of ``mask`` hold."""
    return int(np.count_nonzero(np.bincount(codes[mask], minlength=codes.size)))


def _align(frame: pd.DataFrame, universe: pd.MultiIndex, columns: Sequence[str]) -> pd.DataFrame:
    slim = frame[["request_id", "repeat", *columns]]
    dedup = slim.drop_duplicates(["request_id", "repeat"]).set_index(["request_id", "repeat"])
    return dedup.reindex(universe)


def _role(endpoints: Endpoints, dim: str | None, value: Any, metric: str, stat: str) -> str:
    if dim != "traffic_class" or value != endpoints["promised_class"]:
        return "exploratory"
    if (metric, stat) in (
        (endpoints["primary_metric"], endpoints["primary_stat"]),
        (endpoints["success_metric"], endpoints["success_stat"]),
    ):
        return "primary"
    return "exploratory"


def _slice_spec(dim: str, value: Any, endpoints: Endpoints) -> dict[str, tuple[str, ...]]:
    spec = {m: tuple(st) for m, st in slice_intervals(dim).items()}
    if dim == "traffic_class" and value == endpoints["promised_class"]:
        for m, s in (
            (endpoints["primary_metric"], endpoints["primary_stat"]),
            (endpoints["success_metric"], endpoints["success_stat"]),
        ):
            if s not in spec.get(m, ()):
                spec[m] = (*spec.get(m, ()), s)
    return spec


@dataclass
class _LoadColumns:
    """The paired columns of one load, keyed for one bootstrap call: per (arm, metric, side,
    dimension, value) the aligned values where both arms are defined, and per knee point the
    knee metric; ``col_stats`` the statistics to resample for each; ``specs`` the delta rows to
    report (arm, dimension, value, metric, statistics, pair mask, distinct requests)."""

    universe: pd.MultiIndex
    cluster_codes: np.ndarray
    base_al: pd.DataFrame
    aligned: dict[str, pd.DataFrame]
    slice_values: dict[str, list[Any]]
    columns: dict[Hashable, np.ndarray] = field(default_factory=dict)
    col_stats: dict[Hashable, Sequence[str]] = field(default_factory=dict)
    specs: list[tuple[str, str | None, Any, str, Sequence[str], np.ndarray, int]] = field(default_factory=list)
    knee_specs: list[tuple[str, list[tuple[int, str]], str | None, Any]] = field(default_factory=list)


def _load_align(at_load: pd.DataFrame, base_rows: pd.DataFrame, *, base_arm: str, dims: Sequence[str]) -> _LoadColumns:
    """Every arm's rows of one load aligned on the baseline's (request, repeat) universe."""
    universe = pd.MultiIndex.from_frame(base_rows[["request_id", "repeat"]].drop_duplicates())
    clusters = universe.get_level_values("request_id").to_numpy()
    cluster_codes, _ = pd.factorize(clusters)
    extra = [c for c in SLICE_METRIC_COLUMNS.values() if c in at_load]
    needed = sorted({*METRIC_COLUMNS.values(), *extra, "tpot_s", "ttft_s", "e2e_s", "success", KNEE_METRIC, *dims})
    base_al = _align(base_rows, universe, needed)
    cand_arms = [a for a in pd.unique(at_load["arm"]) if a != base_arm]
    aligned = {a: _align(at_load[at_load["arm"] == a], universe, needed) for a in cand_arms}
    aligned[base_arm] = base_al
    slice_values = {dim: [v for v in pd.unique(base_al[dim].to_numpy()) if pd.notna(v)] for dim in dims}
    return _LoadColumns(
        universe=universe, cluster_codes=cluster_codes, base_al=base_al, aligned=aligned, slice_values=slice_values
    )


def _delta_columns(lc: _LoadColumns, *, base_arm: str, dims: Sequence[str], endpoints: Endpoints) -> None:
    """Adds each candidate's paired columns (all requests and every slice) to ``lc``."""
    base_al = lc.base_al
    for arm in (a for a in lc.aligned if a != base_arm):
        cand_al = lc.aligned[arm]
        groups: list[tuple[str | None, Any, np.ndarray, dict[str, tuple[str, ...]]]] = [
            (None, None, np.ones(len(lc.universe), dtype=bool), dict(HEADLINE_STATS))
        ]
        for dim in dims:
            dim_values = base_al[dim].to_numpy()
            for value in lc.slice_values[dim]:
                groups.append((dim, value, dim_values == value, _slice_spec(dim, value, endpoints)))
        for gdim, value, mask, spec in groups:
            for m, st in spec.items():
                col = METRIC_COLUMNS.get(m, m)
                if col not in base_al:
                    continue  # a slice-only metric this frame lacks (simulated experiments)
                b = base_al[col].to_numpy(dtype=float)
                c = cand_al[col].to_numpy(dtype=float)
                both = np.isfinite(b) & np.isfinite(c) & mask
                n_req = _distinct(lc.cluster_codes, both)
                lc.columns[(arm, m, "base", gdim, value)] = np.where(both, b, np.nan)
                lc.columns[(arm, m, "cand", gdim, value)] = np.where(both, c, np.nan)
                # A statistic too few requests support reads "not measured" without replicates:
                # small slices cost no bootstrap (the replicates drawn do not depend on it).
                boot_stats = tuple(s for s in st if reportable(n_req, s))
                lc.col_stats[(arm, m, "base", gdim, value)] = lc.col_stats[(arm, m, "cand", gdim, value)] = boot_stats
                lc.specs.append((arm, gdim, value, m, st, both, n_req))


def _knee_columns(
    lc: _LoadColumns, *, base_arm: str, dims: Sequence[str], sweeps: Mapping[str, Mapping[str, int]] | None
) -> None:
    """Adds the knee metric of every sweep point (all requests and every slice) to ``lc``; the
    baseline joins a sweep that does not name it as k = 0."""
    for name, arm_ks in dict(sweeps or {}).items():
        points = sorted(((int(k), a) for a, k in arm_ks.items() if a in lc.aligned), key=lambda t: t[0])
        if base_arm not in arm_ks:
            points = [(0, base_arm), *points]
        if len(points) < 2:
            continue
        slice_defs: list[tuple[str | None, Any]] = [(None, None)]
        for dim in dims:
            slice_defs += [(dim, v) for v in lc.slice_values[dim]]
        for sdim, svalue in slice_defs:
            mask = np.ones(len(lc.universe), dtype=bool) if sdim is None else (lc.base_al[sdim].to_numpy() == svalue)
            for _, arm in points:
                kkey = ("knee", arm, sdim, svalue)
                if kkey not in lc.columns:
                    v = lc.aligned[arm][KNEE_METRIC].to_numpy(dtype=float)
                    lc.columns[kkey] = np.where(mask, v, np.nan)
                    lc.col_stats[kkey] = (KNEE_STAT,)
            lc.knee_specs.append((name, points, sdim, svalue))


def _delta_rows(
    lc: _LoadColumns,
    boots: Mapping[Any, np.ndarray],
    *,
    load: Any,
    floor_of: Mapping[tuple, float | None],
    endpoints: Endpoints,
    ci: float,
) -> Iterator[tuple[str, str | None, Any, list[DeltaRow]]]:
    """Per reported spec of ``lc``: (arm, dimension, value, its delta rows)."""
    no_boot = np.full(0, np.nan)
    for arm, sdim, value, m, stat_list, both, n_req in lc.specs:
        bkey, ckey = (arm, m, "base", sdim, value), (arm, m, "cand", sdim, value)
        rows: list[DeltaRow] = []
        for s in stat_list:
            res = paired_delta(
                stat=s,
                base_point=point_stat(lc.columns[bkey], s),
                cand_point=point_stat(lc.columns[ckey], s),
                base_boot=boots.get((bkey, s), no_boot),
                cand_boot=boots.get((ckey, s), no_boot),
                n_requests=n_req,
                ci=ci,
            )
            floor = floor_of.get((str(load), sdim, value, m, s))
            floor = None if floor is None or not np.isfinite(floor) else float(floor)
            row: dict[str, Any] = dict(res)
            row |= {
                "metric": m,
                "stat": s,
                "n_pairs": int(both.sum()),
                "n_excluded": int(both.size - both.sum()) if sdim is None else 0,
                "noise_floor": floor,
                "p_holm": None,
                "role": _role(endpoints, sdim, value, m, s),
                "verdict": verdict(
                    measured=bool(res["measured"]),
                    delta=float(res["delta"]),  # type: ignore[arg-type]
                    delta_lo=float(res["delta_lo"]),  # type: ignore[arg-type]
                    delta_hi=float(res["delta_hi"]),  # type: ignore[arg-type]
                    noise_floor=floor,
                    lower_is_better=m not in HIGHER_IS_BETTER,
                ),
            }
            rows.append(row)  # type: ignore[arg-type]
        yield arm, sdim, value, rows


def _knee_rows(
    lc: _LoadColumns, boots: Mapping[Any, np.ndarray], *, load: Any, endpoints: Endpoints, ci: float
) -> list[dict[str, Any]]:
    """One knee row per sweep and slice of ``lc``: its points, the paired gain of each step
    (seconds of TPOT, positive = faster) and the knee."""
    out: list[dict[str, Any]] = []
    columns, cluster_codes = lc.columns, lc.cluster_codes
    for name, points, kdim, kvalue in lc.knee_specs:
        pts: list[dict[str, Any]] = []
        step_rows: list[dict[str, Any]] = []
        lows: list[float] = []
        for k, arm in points:
            kcol = columns[("knee", arm, kdim, kvalue)]
            pts.append({"arm": arm, "k": k, f"{KNEE_METRIC}_{KNEE_STAT}": point_stat(kcol, KNEE_STAT)})
        for (k0, a0), (k1, a1) in itertools.pairwise(points):
            c0, c1 = columns[("knee", a0, kdim, kvalue)], columns[("knee", a1, kdim, kvalue)]
            n_req = min(
                _distinct(cluster_codes, np.isfinite(c0)),
                _distinct(cluster_codes, np.isfinite(c1)),
            )
            # gain = TPOT at the smaller k minus at the larger k (positive = faster)
            res = paired_delta(
                stat=KNEE_STAT,
                base_point=point_stat(c1, KNEE_STAT),
                cand_point=point_stat(c0, KNEE_STAT),
                base_boot=boots[(("knee", a1, kdim, kvalue), KNEE_STAT)],
                cand_boot=boots[(("knee", a0, kdim, kvalue), KNEE_STAT)],
                n_requests=n_req,
                ci=ci,
            )
            step_rows.append(
                {
                    "from_k": k0,
                    "to_k": k1,
                    "gain_s": res["delta"],
                    "gain_lo": res["delta_lo"],
                    "gain_hi": res["delta_hi"],
                    "measured": res["measured"],
                }
            )
            lows.append(float(res["delta_lo"]))  # type: ignore[arg-type]
        knee = knee_find([k for k, _ in points], lows, margin_s=endpoints["knee_margin_s"])
        out.append(
            {
                "sweep": name,
                "load": str(load),
                "dimension": kdim,
                "value": kvalue,
                "points": pts,
                "steps": step_rows,
                "margin_s": endpoints["knee_margin_s"],
            }
            | knee
        )
    return out


def paired_stage(
    derived: pd.DataFrame,
    *,
    base_arm: str,
    floors: Sequence[NoiseFloorRow],
    sweeps: Mapping[str, Mapping[str, int]] | None,
    endpoints: Endpoints,
    n_boot: int,
    seed: int,
    ci: float,
) -> dict[str, Any]:
    """Returns ``headline_deltas`` ({(arm, load): [DeltaRow]}), ``slice_deltas`` ({(arm, load,
    dimension, value): [DeltaRow]}), ``knees`` ([KneeRow]) and ``notes``.

    Per load, every column (deltas and knees) is resampled in one bootstrap call, so all share
    the same replicates."""
    dims = slice_dimensions(derived)
    floor_of = {
        (f["load"], f["dimension"], f["value"], f["metric"], f["stat"]): f["noise_floor"] for f in floors
    }
    headline_deltas: dict[tuple[str, str], list[DeltaRow]] = {}
    slice_deltas: dict[tuple[str, str, str, Any], list[DeltaRow]] = {}
    knee_rows: list[dict[str, Any]] = []
    notes: list[str] = []
    loads = list(pd.unique(derived["load"]))
    for li, load in enumerate(loads):
        at_load = derived[derived["load"] == load]
        base_rows = at_load[at_load["arm"] == base_arm]
        if base_rows.empty:
            notes.append(f"load {load}: no baseline rows, no paired comparison")
            continue
        lc = _load_align(at_load, base_rows, base_arm=base_arm, dims=dims)
        _delta_columns(lc, base_arm=base_arm, dims=dims, endpoints=endpoints)
        _knee_columns(lc, base_arm=base_arm, dims=dims, sweeps=sweeps)
        boots = bootstrap_distributions(
            {key: col for key, col in lc.columns.items() if lc.col_stats.get(key)},
            stats=lc.col_stats,
            clusters=lc.cluster_codes,
            n_boot=n_boot,
            seed=seed + 104729 * (li + 1),
        )
        for arm, sdim, value, rows in _delta_rows(lc, boots, load=load, floor_of=floor_of, endpoints=endpoints, ci=ci):
            if sdim is None:
                headline_deltas.setdefault((arm, str(load)), []).extend(rows)
            else:
                slice_deltas.setdefault((arm, str(load), sdim, value), []).extend(rows)
        knee_rows += _knee_rows(lc, boots, load=load, endpoints=endpoints, ci=ci)
    return {"headline_deltas": headline_deltas, "slice_deltas": slice_deltas, "knees": knee_rows, "notes": notes}


def primary_holm(
    slice_deltas: Mapping[tuple[str, str, str, Any], list[DeltaRow]], *, endpoints: Endpoints
) -> list[dict[str, Any]]:
    """Holm's correction over the declared primary endpoints: one family for the primary latency
    metric, one for the success metric, each over every candidate arm x load of the promised
    class. Sets ``p_holm`` on those rows (in place) and returns them with ``arm`` and ``load``."""
    out: list[dict[str, Any]] = []
    for metric, stat in (
        (endpoints["primary_metric"], endpoints["primary_stat"]),
        (endpoints["success_metric"], endpoints["success_stat"]),
    ):
        family: list[tuple[str, str, DeltaRow]] = []
        for (arm, load, dim, value), rows in slice_deltas.items():
            if dim != "traffic_class" or value != endpoints["promised_class"]:
                continue
            for r in rows:
                if r["metric"] == metric and r["stat"] == stat:
                    family.append((arm, load, r))
        adjusted = holm_adjust([float(r["p_value"]) if r["p_value"] is not None else float("nan") for *_, r in family])
        for (arm, load, r), p in zip(family, adjusted, strict=True):
            r["p_holm"] = float(p) if np.isfinite(p) else None
            out.append({"arm": arm, "load": load, "family_size": len(family)} | dict(r))
    return out
