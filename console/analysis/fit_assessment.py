"""Fit assessment: does this workload look like one where speculative decoding can pay off?

The five conditions of docs/fit.md (after the background text's "when speculative decoding is
worth evaluating"), each judged ``likely``, ``unlikely`` or ``unknown`` with its numbers and the
reason, plus the generation share of end-to-end latency per traffic class.

Two inputs: what is known before any run (the trace's requests, the experiment's configs and
load levels) and, once a baseline run finished, the per-run facts :func:`run_fit_stats` reduces
its stored results to (cached in ``RunSummary.data["fit"]`` by the worker, so a page GET only
pools small lists). Pure functions over plain data; no Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.analysis.fit_conditions import (
    generation_share,
    heaviest_load,
    output_length_condition,
    proposer_condition,
    quality_condition,
    serving_condition,
    traffic_condition,
)
from console.analysis.fit_stats import FIT_VERSION


def fit_assess(
    *,
    trace: Mapping[str, Any],
    engine: str,
    target_model: str,
    specs: list[dict],
    load_levels: list[dict],
    runs: list[dict],
    catalog: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """The assessment: ``conditions`` (one per :data:`CONDITIONS`, each ``name``, ``title``,
    ``verdict``, ``numbers``, ``reason``), ``generation_share`` (per class), ``stage``
    ("before any run" or "after N baseline run(s)").

    ``trace``: ``classes`` ({class: count}), ``rate_rps`` (the trace's own mean arrival rate),
    ``output_limits`` and ``recorded_output_tokens`` (one per request, tokens or None);
    ``specs``: the candidates' speculative configs; ``runs``: :func:`run_fit_stats` of the
    finished baseline runs; ``catalog``: {model name: {"family", "size_bytes"}}.
    """
    heaviest = heaviest_load(load_levels)
    return {
        "version": FIT_VERSION,
        "stage": f"after {len(runs)} baseline run(s)" if runs else "before any run",
        "conditions": [
            quality_condition(runs),
            output_length_condition(trace, runs),
            serving_condition(engine, runs, heaviest),
            traffic_condition(trace, load_levels, runs, heaviest),
            proposer_condition(engine, target_model, specs, catalog),
        ],
        "generation_share": generation_share(runs),
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items()) or "—"
    return str(value)


def numbers_lines(name: str, numbers: Mapping[str, Any]) -> list[str]:
    """A condition's numbers as short lines for the page (the API returns them as they are)."""
    if name == "proposer":
        lines = []
        for p in numbers.get("proposers") or []:
            extra = ", configured" if p.get("configured") else ""
            note = f"; {p['note']}" if p.get("note") else ""
            lines.append(f"{p['proposer']}: {p['kind']} ({p['source']}{extra}{note})")
        return lines
    lines = [f"{k}: {_fmt(v)}" for k, v in numbers.items() if k != "loads"]
    for row in numbers.get("loads") or []:
        lines.append(" · ".join(f"{k} {_fmt(v)}" for k, v in row.items()))
    return lines
