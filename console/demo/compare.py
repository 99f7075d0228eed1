"""Step 4: the comparison computed and its headline printed, with the A/A noise floor and the
fit assessment."""

from __future__ import annotations

from console import numbers
from console.analysis.comparison.schema import Summary, summary_load
from console.analysis.selectors import experiment_fit_assessment
from console.analysis.services import comparison_refresh
from console.demo.output import Say
from console.experiments.models import Experiment


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
            f"{numbers.milliseconds(row.tpot_s_p50):>11}"
            f"{numbers.duration(row.e2e_s_p95):>10}"
            f"{numbers.rate(row.acceptance_rate):>8}"
            f"{numbers.number(row.accepted_per_pass):>9}"
            f"{numbers.rate(row.exact_match_rate):>7}"
        )
    floors = [f for f in summary.noise_floor if f.dimension is None and f.metric == "tpot_s" and f.stat == "p50"]
    for f in floors:
        say(
            f"noise floor (A/A, baseline repeat against repeat) at {f.load}: TPOT p50 "
            f"{numbers.plus_minus(f.noise_floor_rel, '%')} over {f.n_repeats} repeats"
        )
    if not floors:
        say("noise floor: not measured (one repeat)")
    fit = experiment_fit_assessment(experiment=experiment)
    say(f"fit assessment ({fit.get('stage')}):")
    for condition in fit.get("conditions") or []:
        say(f"  {condition.get('title') or condition.get('name')}: {condition.get('verdict')}")
    return summary
