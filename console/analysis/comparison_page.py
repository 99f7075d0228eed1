"""The comparison page's context, built from the typed stored comparison
(``console.analysis.comparison.schema.Summary``): the headline table's columns and cells, the
primary endpoints, the noise floors, the chosen slice's table and charts, and every section
the page shows. Presentation only: every number is read off the summary, none is computed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from console import numbers, words
from console.analysis import plots, slice_view
from console.analysis.comparison.schema import Capacity, DeltaRow, HeadlineRow, Sessions, SliceRow, Summary
from console.analysis.verdict_words import PrimaryView, saturated_loads, verdict_lines

if TYPE_CHECKING:
    import plotly.graph_objects as go

Stat = Callable[[HeadlineRow | SliceRow], float | int | None]


@dataclass(frozen=True)
class Column:
    """One column of the headline table: its id, label and unit, how to read its value off a
    row's statistics, and the (metric, stat) of its paired comparison (None: none)."""

    key: str
    label: str
    unit: str
    value: Stat
    compared: tuple[str, str] | None = None
    interval: str | None = None  # the row's field prefix of the value's own ``_lo``/``_hi``, where it has them


def _whole_experiment(value: Callable[[HeadlineRow], float | int | None]) -> Stat:
    """A column counted for the whole experiment only: a slice's row shows "—"."""
    return lambda row: value(row) if isinstance(row, HeadlineRow) else None


# The CTO's columns first (the declared latency endpoints, cost per success, quality), so they stay
# in view on a 1024 px screen; the engineer's detail follows (the table scrolls, Arm stays pinned).
HEADLINE_COLUMNS = [
    Column("e2e_s_p95", "e2e p95", "s", lambda r: r.e2e_s_p95, ("e2e_s", "p95")),
    Column("tpot_s_p95", "TPOT p95", "ms", lambda r: r.tpot_s_p95, ("tpot_s", "p95")),
    Column("cost_per_success_usd", "$/successful task", "$", _whole_experiment(lambda r: r.cost_per_success_usd)),
    Column("n_regressions", "quality regressions", "", _whole_experiment(lambda r: r.n_regressions)),
    # A traffic class's goodput is compared through its per-request share (metrics.class_goodput).
    Column("goodput_rps", "goodput", "req/s", lambda r: r.goodput_rps, ("class_goodput_rps", "mean")),
    Column("ttft_s_p95", "TTFT p95", "s", lambda r: r.ttft_s_p95, ("ttft_s", "p95")),
    Column("tpot_s_p50", "TPOT p50", "ms", lambda r: r.tpot_s_p50, ("tpot_s", "p50")),
    Column("e2e_s_p99", "e2e p99", "s", lambda r: r.e2e_s_p99, ("e2e_s", "p99")),
    Column("acceptance_rate", "acceptance", "%", lambda r: r.acceptance_rate, interval="acceptance_rate"),
    Column("mean_acceptance_length", "mean accept. length", "", lambda r: r.mean_acceptance_length),
    Column("tokens_per_pass", "tokens/target pass", "", lambda r: r.tokens_per_pass),
]
SATURATION_COLUMNS = frozenset({"e2e_s_p95", "e2e_s_p99", "goodput_rps"})  # say "baseline past saturation"


def _fmt(value, unit: str) -> str:
    """A cell's value in its column's unit, through the one formatting layer (console.numbers)."""
    return numbers.show(value, unit)


@dataclass(frozen=True)
class DeltaCell:
    """What a paired comparison adds to a cell: its verdict (a CSS class suffix), the ratio with
    its interval (or why it was not measured) and the A/A floor beside it."""

    verdict: str | None = None
    delta: str | None = None
    floor: str | None = None


def _delta_cell(delta: DeltaRow | None) -> DeltaCell:
    """The paired comparison under a value: ratio with interval, the A/A floor beside it, and the
    verdict (or why it was not measured)."""
    if delta is None:
        return DeltaCell()
    if not delta.measured:
        return DeltaCell(verdict="not-measured", delta=delta.reason or "not measured", floor="")
    ratio = None
    if delta.ratio is not None:
        lo, hi = delta.ratio_lo, delta.ratio_hi
        ratio = numbers.ratio(delta.ratio) + (f" {numbers.interval(lo, hi, 'x')}" if lo is not None and hi is not None else "")
    floor = "no noise floor" if delta.noise_floor is None else f"floor {floor_text(delta.metric, delta.noise_floor)}"
    return DeltaCell(verdict=delta.verdict.replace(" ", "-"), delta=ratio, floor=floor)


# Metrics that are shares of requests (means of yes/no): their floors read in percentage points.
SHARE_METRICS = frozenset(
    {"success", "met_deadline", "exact_match", "json_valid", "schema_valid", "tool_call_valid", "acceptance_rate"}
)


def floor_text(metric: str, floor: float) -> str:
    """A noise floor with the unit its metric's name says: seconds (``_s``, shown in ms below
    1 s), requests per second (``_rps``), dollars (``_usd``), percentage points (a share of
    requests, ``SHARE_METRICS``), else a bare number."""
    by_suffix = next((unit for suffix, unit in (("_s", "s"), ("_rps", "req/s"), ("_usd", "$")) if metric.endswith(suffix)), None)
    return numbers.plus_minus(floor, by_suffix or ("pp" if metric in SHARE_METRICS else ""))


@dataclass(frozen=True)
class Cell:
    text: str
    verdict: str | None
    delta: str | None
    floor: str | None
    note: tuple[str, str] | None = None  # ("baseline past saturation at 2x", the same with its rates and waits)


@dataclass(frozen=True)
class HeadlineView:
    arm: str
    load: str
    is_baseline: bool
    cells: list[Cell]
    n: int  # requests (every repeat)
    failed: int


def _headline_table(rows: list[slice_view.TableRow], saturated: Mapping[str, str] | None = None) -> list[HeadlineView]:
    """Rows of cells: value, and for candidates the paired delta with its interval, the noise
    floor and the verdict (exploratory: the gate reads the primary endpoints only). ``rows``: the
    headline's or a slice's; ``saturated``: load -> the baseline past saturation there, in words."""
    table = []
    for row in rows:
        stats = row["stats"]
        deltas = {(d.metric, d.stat): d for d in stats.deltas}
        detail = (saturated or {}).get(row["load"])
        notes = (f"baseline past saturation at {row['load']}", detail) if detail else None
        cells = []
        for column in HEADLINE_COLUMNS:
            cell = _delta_cell(deltas.get(column.compared) if column.compared else None)
            if column.interval:  # the value's own interval, where the row has one (a headline row)
                lo, hi = (getattr(stats, f"{column.interval}_{end}", None) for end in ("lo", "hi"))
                if lo is not None and hi is not None:
                    cell = DeltaCell(delta=f"95% CI {numbers.interval(lo, hi, column.unit)}")
            note = notes if column.key in SATURATION_COLUMNS else None
            cells.append(Cell(_fmt(column.value(stats), column.unit), cell.verdict, cell.delta, cell.floor, note))
        table.append(
            HeadlineView(row["arm"], row["load"], row["is_baseline"], cells, row["n_requests"], row["n_failed"])
        )
    return table


def _not_measured_legend(table: list[HeadlineView]) -> list[str]:
    """Why cells were not measured, each reason once, numbered: the cells then carry only
    "not measured [n]", so a row of five such cells does not repeat one sentence five times."""
    legend: list[str] = []
    for row in table:
        for i, cell in enumerate(row.cells):
            if cell.verdict != "not-measured" or not cell.delta:
                continue
            if cell.delta not in legend:
                legend.append(cell.delta)
            row.cells[i] = replace(cell, delta=f"not measured [{legend.index(cell.delta) + 1}]")
    return legend


def _primary_units(metric: str) -> tuple[str, str]:
    """The units of a primary endpoint's values and of its difference: a latency in milliseconds,
    a share of requests as a rate with its difference in percentage points, else bare numbers."""
    if metric.endswith("_s"):
        return "ms", "ms"
    if metric in SHARE_METRICS:
        return "fraction", "pp"
    return "", ""


def _primary_rows(summary: Summary, saturated: Mapping[str, str]) -> list[PrimaryView]:
    rows = []
    for r in summary.primary:
        unit, delta_unit = _primary_units(r.metric)
        cell = _delta_cell(r)
        interval = numbers.interval(r.delta_lo, r.delta_hi, delta_unit) if r.measured else ""
        rows.append(
            PrimaryView(
                arm=r.arm,
                load=r.load,
                metric=r.metric,
                stat=r.stat,
                name=words.metric_words(r.metric, r.stat),
                measured=r.measured,
                reason=r.reason,
                p_holm=r.p_holm,
                verdict=cell.verdict,
                floor=cell.floor,
                base_text=_fmt(r.base, unit),
                cand_text=_fmt(r.cand, unit),
                delta_text=_fmt(r.delta, delta_unit),
                interval_text=interval,
                saturation=saturated.get(r.load) if r.metric == "e2e_s" else None,
            )
        )
    return rows


@dataclass(frozen=True)
class NoiseFloorView:
    load: str
    metric: str
    stat: str
    name: str  # the metric and statistic in words ("TPOT p95")
    n_repeats: int
    noise_floor: float | None
    floor_text: str | None
    rel_text: str | None


def _noise_floor_rows(summary: Summary) -> list[NoiseFloorView]:
    """The all-requests floors, each with the unit its metric's name says."""
    return [
        NoiseFloorView(
            load=n.load,
            metric=n.metric,
            stat=n.stat,
            name=words.metric_words(n.metric, n.stat),
            n_repeats=n.n_repeats,
            noise_floor=n.noise_floor,
            floor_text=None if n.noise_floor is None else floor_text(n.metric, n.noise_floor),
            rel_text=None if n.noise_floor_rel is None else numbers.plus_minus(n.noise_floor_rel, "%"),
        )
        for n in summary.noise_floor
        if n.dimension is None
    ]


def _slice_figures(summary: Summary, chosen, rows: list[slice_view.TableRow]) -> list[tuple[str, go.Figure]]:
    """The charts the slice selector redraws: latency CDFs and the load curves of ``rows``."""
    return [
        (
            "cdf-e2e",
            plots.latency_cdf(
                slice_view.slice_cdf_series(summary, chosen, metric="e2e_s"), metric="e2e_s", title="End-to-end latency CDF"
            ),
        ),
        (
            "cdf-ttft",
            plots.latency_cdf(slice_view.slice_cdf_series(summary, chosen, metric="ttft_s"), metric="ttft_s", title="TTFT CDF"),
        ),
        (
            "tpot-load",
            plots.metric_vs_load(
                rows, value=lambda r: r.tpot_s_p50, title="TPOT p50 vs load", scale=1000, unit="ms per token"
            ),
        ),
        (
            "goodput-load",
            plots.metric_vs_load(
                rows, value=lambda r: r.goodput_rps, title="Goodput vs load", unit="requests/s within deadline"
            ),
        ),
    ]


def _slice_context(summary: Summary, raw: str | None) -> dict:
    """The slice selector's state and the table and charts of the chosen slice (all requests when
    ``raw`` names none: ``slice_error`` then says why)."""
    error = None
    try:
        chosen = slice_view.slice_parse(summary, raw)
    except slice_view.SliceError as exc:
        chosen, error = None, str(exc)
    rows = slice_view.slice_rows(summary, chosen)
    titled = _slice_figures(summary, chosen, rows)
    table = _headline_table(rows, saturated_loads(summary.saturation))
    label = None
    if chosen is not None:
        label = f"{words.key_words(chosen[0])} = {chosen[1]}"
        for _div_id, fig in titled:
            fig.update_layout(title=f"{fig.layout.title.text} ({label})")
    return {
        "slice_groups": slice_view.slice_options(summary),
        "slice_selected": slice_view.ALL if chosen is None else slice_view.slice_key(*chosen),
        "slice_label": label,
        "slice_error": error,
        "headline_table": table,
        "not_measured_legend": _not_measured_legend(table),
        "slice_figures": [(div_id, plots.fig_html(fig, div_id=f"fig-{div_id}")) for div_id, fig in titled],
    }


def _sessions_context(summary: Summary) -> Sessions | None:
    """The multi-turn tables (``summary.sessions``, console.analysis.sessions.sessions_aggregate
    and turns_aggregate), or None when no arm replayed a session of more than one turn."""
    if not any(row.n_multi_turn > 0 for row in summary.sessions.by_arm_load):
        return None
    return summary.sessions


def _figures(summary: Summary) -> list[tuple[str, str]]:
    """The whole experiment's charts: acceptance by task and position, knees, memory per arm."""
    acceptance = summary.acceptance
    figures = [
        ("acc-task", plots.acceptance_by_task(acceptance.by_task)),
        ("acc-outpos", plots.acceptance_by_output_position(acceptance.by_output_position)),
        ("acc-draftpos", plots.acceptance_by_draft_position(acceptance.by_position)),
        ("sweep", plots.sweep_knees(summary.knees)),
        ("memory", plots.memory_per_arm(summary.headline)),
    ]
    return [(div_id, plots.fig_html(fig, div_id=f"fig-{div_id}")) for div_id, fig in figures]


def _capacity_figures(capacity: Capacity | None) -> list[tuple[str, str]]:
    """The capacity curves, the end-to-end one only when the SLO bounds it."""
    if capacity is None:
        return []
    return [
        (f"cap-{metric}", plots.fig_html(plots.capacity_curve(capacity, metric=metric), div_id=f"fig-cap-{metric}"))
        for metric in plots.CAPACITY_METRICS
        if metric != "p95_e2e_s" or capacity.slo.p95_e2e_s is not None
    ]


def comparison_context(summary: Summary, raw_slice: str | None) -> dict:
    """Everything the comparison page shows of a stored comparison, the chosen slice's part
    included."""
    quality = summary.quality
    saturated = saturated_loads(summary.saturation)
    primary = _primary_rows(summary, saturated)
    return _slice_context(summary, raw_slice) | {
        "headline_columns": HEADLINE_COLUMNS,
        "figures": _figures(summary),
        "acceptance_heatmaps": plots.acceptance_heatmaps(summary),
        "regressions": [
            r.model_copy(update={"checks": _checks_words(r.checks)}) for r in quality.regressions[:200]
        ],
        "quality": quality,
        "first_divergences": quality.first_divergences,
        "class_goodput": [{**g, "saturation": saturated.get(g["load"])} for g in slice_view.class_goodput_rows(summary)],
        "saturation": saturated,
        "telemetry": slice_view.telemetry_rows(summary),
        "noise_floor": _noise_floor_rows(summary),
        "stability": summary.baseline_stability,
        "endpoints": summary.endpoints,
        "endpoint_words": {
            "primary": words.metric_words(summary.endpoints.primary_metric, summary.endpoints.primary_stat),
            "success": words.key_words(summary.endpoints.success_metric),
        },
        "primary": primary,
        "verdicts": verdict_lines(
            primary,
            metric=summary.endpoints.primary_metric,
            stat=summary.endpoints.primary_stat,
            promised=summary.endpoints.promised_class,
            saturated=saturated,
        ),
        "quality_counts": [c.model_copy(update={"check": words.key_words(c.check)}) for c in quality.counts],
        "correctness": summary.correctness,
        "correct_total": _correct_total(summary),
        "capacity": summary.capacity,
        "capacity_figures": _capacity_figures(summary.capacity),
        "sessions": _sessions_context(summary),
        "knees": _knee_rows(summary),
        "notes": summary.notes,
    }


def _checks_words(checks: str) -> str:
    """Comma-separated check keys ("json_valid,exact_match") as their labels."""
    return words.listed(words.key_words(c.strip()) for c in checks.split(",") if c.strip())


@dataclass(frozen=True)
class KneeView:
    sweep: str
    load: str
    slice: str  # "all requests", else the dimension in words and its value
    knee_k: int
    reached: bool
    margin_s: float


def _knee_rows(summary: Summary) -> list[KneeView]:
    """The sweeps' knees that were found, each slice named in words."""
    return [
        KneeView(
            sweep=k.sweep,
            load=k.load,
            slice=f"{words.key_words(k.dimension)} = {k.value}" if k.dimension else "all requests",
            knee_k=k.knee_k,
            reached=k.reached,
            margin_s=k.margin_s,
        )
        for k in summary.knees
        if k.knee_k is not None
    ]


def _correct_total(summary: Summary) -> dict[str, int] | None:
    """Graded answers over every arm, load and task: ``{"correct", "gradable"}``; None ungraded.
    "0 regressions" over no correct answer at all is no good news: the page says both."""
    if summary.correctness is None or not summary.correctness.rates:
        return None
    rates = summary.correctness.rates
    return {"correct": sum(r.correct for r in rates), "gradable": sum(r.gradable for r in rates)}
