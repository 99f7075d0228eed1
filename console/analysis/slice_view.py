"""The comparison page's slice views, read from the stored comparison: which slices there are,
which one a request asks for, and that slice's rows, shaped like the whole experiment's so the
same table and charts draw either. Pure functions over the typed comparison
(``console.analysis.comparison.schema``; a comparison as JSON is read through the model first);
they return the page's rows (plain TypedDicts for the templates). Nothing here computes a
statistic: the intervals, noise floors and "not measured" verdicts of every slice are computed
with the whole experiment's by ``comparison_compute`` (``paired.paired_stage``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from console import words
from console.analysis.comparison.schema import (
    Comparison,
    DeltaRow,
    HeadlineRow,
    SliceRow,
    comparison_load,
)

ALL = "all"
# The slice dimensions in the selector's order, each by its label (console.words).
DIMENSION_LABELS: dict[str, str] = {
    d: words.DIMENSION_LABELS[d]
    for d in ("task", "traffic_class", "run_output_bucket", "output_bucket", "prompt_bucket", "turn_bucket")
}
# Token-range labels ("0-64", "64-256", "256+") sort by their lower edge, not as text.
_LOWER_EDGE = re.compile(r"(\d+)(?:-\d+|\+)")


class SliceError(ValueError):
    """The requested slice names no slice of this comparison."""


class SliceOption(TypedDict):
    key: str  # slice_key(dimension, value)
    value: str
    n_requests: int | None  # the most distinct requests of its paired comparisons; None: none


class SliceGroup(TypedDict):
    dimension: str
    label: str
    options: list[SliceOption]


class TableRow(TypedDict):
    """One row of the headline table and the load charts: an arm at a load, over all requests
    (``stats`` a headline row) or over one slice (a slice row)."""

    arm: str
    load: str
    is_baseline: bool
    n_requests: int
    n_failed: int
    stats: HeadlineRow | SliceRow


class CdfLine(TypedDict):
    arm: str
    load: str
    x: list[float]  # seconds
    y: list[float]  # share of requests, 0..1


class ClassGoodputRow(TypedDict):
    traffic_class: str
    load: str
    arm: str
    is_baseline: bool
    goodput_rps: float | None
    attainment: float | None
    n_requests: int
    # The paired class_goodput_rps comparison as stored (the DeltaRow's JSON: the template reads
    # it like the rest of the page); None for the baseline or a comparison stored without it.
    delta: dict[str, Any] | None


class TelemetryRow(TypedDict):
    arm: str
    load: str
    mean_util: float | None
    energy_j: float | None
    energy_per_success_j: float | None
    measured: bool


def _typed(summary: Comparison | Mapping[str, Any]) -> Comparison:
    return summary if isinstance(summary, Comparison) else comparison_load(summary)


def slice_key(dimension: str, value: Any) -> str:
    """The query-string form of a slice: ``dimension:value``."""
    return f"{dimension}:{value}"


def slice_options(summary: Comparison | Mapping[str, Any]) -> list[SliceGroup]:
    """The selector's groups, in ``DIMENSION_LABELS`` order; each option's ``n_requests`` is the
    most distinct requests any of the slice's paired comparisons has (the resampled unit the "n
    too small" rule counts), None when no candidate was compared in it."""
    comparison = _typed(summary)
    dims = list(comparison.slice_dimensions)
    order = [d for d in DIMENSION_LABELS if d in dims] + [d for d in dims if d not in DIMENSION_LABELS]
    groups: list[SliceGroup] = []
    for dim in order:
        counts: dict[str, int | None] = {}
        for r in comparison.slices:
            if r.dimension != dim:
                continue
            best = counts.get(r.value)
            counts[r.value] = max([*(d.n_requests for d in r.deltas), *([best] if best is not None else [])], default=None)
        options: list[SliceOption] = [
            {"key": slice_key(dim, v), "value": v, "n_requests": n} for v, n in _in_order(counts.items())
        ]
        if options:
            groups.append({"dimension": dim, "label": words.key_words(dim), "options": options})
    return groups


def _in_order(items: Iterable[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
    """Slice values in their stored order, unless every one is a token range: then by lower edge."""
    pairs = list(items)
    lows = [_LOWER_EDGE.fullmatch(str(v)) for v, _ in pairs]
    edges = [int(m.group(1)) for m in lows if m is not None]
    if len(edges) < len(pairs):
        return pairs
    return [pair for _, pair in sorted(zip(edges, pairs, strict=True), key=lambda e: e[0])]


def slice_parse(summary: Comparison | Mapping[str, Any], raw: str | None) -> tuple[str, str] | None:
    """``None`` for all requests (no parameter, empty, or ``all``), else ``(dimension, value)``.
    Raises :class:`SliceError` saying which slices exist when ``raw`` names none of them."""
    raw = (raw or "").strip()
    if raw in ("", ALL):
        return None
    groups = slice_options(summary)
    for group in groups:
        for option in group["options"]:
            if option["key"] == raw:
                return group["dimension"], option["value"]
    dims = ", ".join(g["dimension"] for g in groups) or "none"
    raise SliceError(
        f"slice: {raw[:80]!r} is not a slice of this comparison; use all or dimension:value with a "
        f"dimension among {dims} (the selector lists every value)"
    )


def _table_row(stats: HeadlineRow | SliceRow, *, is_baseline: bool) -> TableRow:
    return {
        "arm": stats.arm,
        "load": stats.load,
        "is_baseline": is_baseline,
        "n_requests": stats.n_requests,
        "n_failed": stats.n_failed,
        "stats": stats,
    }


def slice_rows(summary: Comparison | Mapping[str, Any], chosen: tuple[str, str] | None) -> list[TableRow]:
    """The rows the headline table and the load charts draw: the whole experiment's headline rows,
    or the chosen slice's rows (one per arm x load, in the headline's order)."""
    comparison = _typed(summary)
    headline = comparison.headline
    if chosen is None:
        return [_table_row(h, is_baseline=h.is_baseline) for h in headline]
    dim, value = chosen
    found = {(r.arm, r.load): r for r in comparison.slices if r.dimension == dim and r.value == value}
    order = [(h.arm, h.load) for h in headline]
    order += [k for k in found if k not in order]
    return [_table_row(found[k], is_baseline=k[0] == comparison.baseline_arm) for k in order if k in found]


def slice_cdf_series(
    summary: Comparison | Mapping[str, Any], chosen: tuple[str, str] | None, *, metric: str
) -> list[CdfLine]:
    """CDF series (``arm``, ``load``, ``x`` seconds, ``y`` share) of ``metric`` for the slice, in
    the format of the whole experiment's ``cdf``."""
    comparison = _typed(summary)
    if chosen is None:
        return [{"arm": s.arm, "load": s.load, "x": list(s.x), "y": list(s.y)} for s in comparison.cdf.of(metric)]
    dim, value = chosen
    q = list(comparison.slice_cdf.q)
    return [
        {"arm": s.arm, "load": s.load, "x": list(s.x), "y": q}
        for s in comparison.slice_cdf.series
        if s.dimension == dim and s.value == value and s.metric == metric
    ]


def _class_goodput_delta(row: SliceRow) -> DeltaRow | None:
    return next((d for d in row.deltas if d.metric == "class_goodput_rps" and d.stat == "mean"), None)


def class_goodput_rows(summary: Comparison | Mapping[str, Any]) -> list[ClassGoodputRow]:
    """Per traffic class x load x arm: goodput (requests within the class's deadline per second)
    and, for candidates, the paired ``class_goodput_rps`` comparison with its interval, floor and
    verdict (``delta`` None for the baseline, or a comparison stored without it)."""
    comparison = _typed(summary)
    out: list[ClassGoodputRow] = []
    for r in comparison.slices:
        if r.dimension != "traffic_class":
            continue
        delta = _class_goodput_delta(r)
        out.append(
            {
                "traffic_class": r.value,
                "load": r.load,
                "arm": r.arm,
                "is_baseline": r.arm == comparison.baseline_arm,
                "goodput_rps": r.goodput_rps,
                "attainment": r.deadline_attainment,
                "n_requests": r.n_requests,
                "delta": None if delta is None else delta.model_dump(mode="json"),
            }
        )
    out.sort(key=lambda row: (str(row["traffic_class"]), str(row["load"]), not row["is_baseline"], str(row["arm"])))
    return out


def telemetry_rows(summary: Comparison | Mapping[str, Any]) -> list[TelemetryRow]:
    """Per arm x load: mean accelerator utilisation (0..1), energy (J) and energy per successful
    request (J), each None when not measured (a CPU run samples no accelerator)."""
    out: list[TelemetryRow] = []
    for h in _typed(summary).headline:
        energy, util = h.energy_j, h.mean_util
        out.append(
            {
                "arm": h.arm,
                "load": h.load,
                "mean_util": util,
                "energy_j": energy,
                "energy_per_success_j": energy / h.successes if energy is not None and h.successes else None,
                "measured": energy is not None or util is not None,
            }
        )
    return out
