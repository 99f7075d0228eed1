"""An experiment's draft-length schedule as the console shows and exports it: the stored comparison,
each arm's speculative config and the baseline runs' replay facts read from the database, handed to
``console.policies.schedule`` (the evidence rule, and the naive median-best rule beside it), and the
chart of k per batch size with the evidence behind each load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from console.analysis.comparison.schema import ComparisonSchemaError
from console.analysis.selectors import comparison_summary_for_experiment
from console.experiments.models import Experiment, Run
from console.policies.schedule import (
    BatchSchedule,
    ScheduleError,
    batch_sizes_replay,
    schedule_derive,
    schedule_point_best,
)
from console.results.models import RunSummary
from console.words import metric_words


@dataclass(frozen=True)
class ScheduleView:
    """The evidence rule's schedule and the naive rule's on the same results, or why there is none."""

    experiment: Experiment
    schedule: BatchSchedule | None
    naive: BatchSchedule | None
    error: str | None


def _replay_facts(experiment: Experiment) -> list[dict[str, Any]]:
    """The baseline runs' fit facts (``inflight_mean`` per load), as the worker stored them."""
    runs = experiment.runs.filter(status=Run.Status.DONE, arm__is_baseline=True)
    rows = RunSummary.objects.filter(run__in=runs).values_list("data", flat=True)
    return [fit for fit in ((data or {}).get("fit") for data in rows) if isinstance(fit, dict)]


def experiment_schedule(*, experiment: Experiment, max_batch_size: int = 1024) -> ScheduleView:
    """The schedule of ``experiment`` from its stored comparison; ``error`` says why there is none
    (no comparison yet, one in another schema, no sweep of one proposer, ...)."""
    try:
        summary = comparison_summary_for_experiment(experiment=experiment)
    except ComparisonSchemaError as exc:
        return ScheduleView(experiment, None, None, str(exc))
    if summary is None:
        return ScheduleView(experiment, None, None, "no comparison is stored yet: it is computed when the runs finish")
    configs = {a.label: a.config.speculative_config for a in experiment.arms.select_related("config")}
    replay = batch_sizes_replay(_replay_facts(experiment))
    try:
        schedule = schedule_derive(summary, speculative_configs=configs, replay=replay, max_batch_size=max_batch_size)
        naive = schedule_point_best(summary, speculative_configs=configs, replay=replay, max_batch_size=max_batch_size)
    except ScheduleError as exc:
        return ScheduleView(experiment, None, None, str(exc))
    return ScheduleView(experiment, schedule, naive, None)


def schedule_document(view: ScheduleView) -> dict[str, Any]:
    """The schedule as JSON: the ``speculative_config`` to give vLLM, and the evidence per band."""
    s = view.schedule
    if s is None:
        return {"experiment_id": view.experiment.pk, "speculative_config": None, "reason": view.error}
    return {
        "experiment_id": view.experiment.pk,
        "speculative_config": s.speculative_config,
        "reason": s.reason,
        "endpoint": {"metric": s.metric, "stat": s.stat, "traffic_class": s.promised_class},
        "arms": s.arms,
        "bands": [
            {
                "start": b.start,
                "end": b.end,
                "k": b.k,
                "evidence": b.evidence,
                "note": b.note,
                "loads": [c.load for c in b.loads],
            }
            for b in s.bands
        ],
        "loads": [_load_json(c) for c in (*s.loads, *s.unplaced)],
        "naive_schedule": [list(x) for x in view.naive.schedule] if view.naive else None,
    }


def _load_json(c: Any) -> dict[str, Any]:
    return {
        "load": c.load,
        "batch_size": c.batch_size,
        "batch_source": c.batch_source,
        "k": c.k,
        "arm": c.arm,
        "ratio": c.ratio,
        "ratio_interval": [c.ratio_lo, c.ratio_hi],
        "reason": c.reason,
    }


def schedule_figure(s: BatchSchedule) -> go.Figure:
    """k chosen per batch size (a step line; dotted where there is no evidence) over each load's
    candidates: their ratio to the baseline with its interval, at the load's batch size."""
    fig = go.Figure()
    for band in s.bands:
        observed = band.evidence == "observed"
        fig.add_trace(
            go.Scatter(
                x=[band.start, band.end + 1],
                y=[band.k, band.k],
                mode="lines",
                line=dict(color="#1570ef" if observed else "#98a2b3", width=3, dash="solid" if observed else "dot"),
                name="k chosen" if observed else "no evidence",
                legendgroup="observed" if observed else "none",
                showlegend=False,
                hovertemplate=f"batch {band.start}–{band.end}: k={band.k}<extra>{band.note}</extra>",
                yaxis="y",
            )
        )
    for arm, k in s.arms.items():
        xs, ys, plus, minus = [], [], [], []
        for c in s.loads:
            cell = next((x for x in c.candidates if x.arm == arm), None)
            if cell is None or cell.ratio is None:
                continue
            xs.append(c.batch_size)
            ys.append(cell.ratio)
            plus.append(None if cell.ratio_hi is None else cell.ratio_hi - cell.ratio)
            minus.append(None if cell.ratio_lo is None else cell.ratio - cell.ratio_lo)
        fig.add_trace(
            go.Scatter(
                x=xs, y=ys, mode="markers", name=f"{arm} (k={k})", yaxis="y2",
                error_y=dict(type="data", array=plus, arrayminus=minus, visible=True),
                hovertemplate="batch %{x:.1f}: ratio %{y:.2f}<extra>" + arm + "</extra>",
            )
        )  # fmt: skip
    fig.update_layout(
        title=f"Draft length by batch size ({metric_words(s.metric, s.stat)}, {s.promised_class})",
        xaxis=dict(title="running batch size (requests)", type="log"),
        yaxis=dict(title="k chosen", rangemode="tozero", dtick=1),
        yaxis2=dict(title="candidate / baseline", overlaying="y", side="right", showgrid=False),
        legend=dict(orientation="h", y=-0.25),
    )
    return fig
