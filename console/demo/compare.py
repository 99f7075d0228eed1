"""Step 4: the comparison computed and its headline printed, with the A/A noise floor and the
fit assessment."""

from __future__ import annotations

from typing import Any

from console.analysis.comparison.schema import Summary, summary_load
from console.analysis.selectors import experiment_fit_assessment
from console.analysis.services import comparison_refresh
from console.demo.output import Say
from console.experiments.models import Experiment


def _fmt(value: Any, pattern: str) -> str:
    return pattern.format(value) if value is not None else "—"


def demo_summary_print(*, say: Say, experiment: Experiment) -> Summary | None:
    """Print the headline table, the A/A noise floor and the fit assessment; returns the
    comparison summary (None when nothing could be compared)."""
    say(experiment.notes)
    stored = comparison_refresh(experiment_id=experiment.pk)
    if not stored:
        say("no finished baseline run: nothing to compare")
        return None
    summary = summary_load(stored)
    say(f"{'arm':<24}{'load':>6}{'TPOT p50':>11}{'e2e p95':>10}{'accept':>8}{'tok/pass':>9}{'exact':>7}")
    for row in summary.headline:
        say(
            f"{row.arm[:23]:<24}{row.load:>6}"
            f"{_fmt(row.tpot_s_p50 and row.tpot_s_p50 * 1000, '{:.0f} ms'):>11}"
            f"{_fmt(row.e2e_s_p95, '{:.2f} s'):>10}"
            f"{_fmt(row.acceptance_rate, '{:.0%}'):>8}"
            f"{_fmt(row.accepted_per_pass, '{:.2f}'):>9}"
            f"{_fmt(row.exact_match_rate, '{:.0%}'):>7}"
        )
    floors = [f for f in summary.noise_floor if f.dimension is None and f.metric == "tpot_s" and f.stat == "p50"]
    for f in floors:
        say(
            f"noise floor (A/A, baseline repeat against repeat) at {f.load}: TPOT p50 "
            f"{_fmt(f.noise_floor_rel, '{:.1%}')} over {f.n_repeats} repeats"
        )
    if not floors:
        say("noise floor: not measured (one repeat)")
    fit = experiment_fit_assessment(experiment=experiment)
    say(f"fit assessment ({fit.get('stage')}):")
    for condition in fit.get("conditions") or []:
        say(f"  {condition.get('title') or condition.get('name')}: {condition.get('verdict')}")
    return summary
