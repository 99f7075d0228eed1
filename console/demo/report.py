"""The demo's last lines: where its time went (``console.demo.budget``), then where to look and
how to log in."""

from __future__ import annotations

from console.decisions.models import Decision
from console.demo.budget import budget_lines, experiment_budget
from console.demo.output import Say
from console.demo.plan import DEMO_PASSWORD, DEMO_TEAM
from console.experiments.models import Experiment
from console.policies.models import SlicePolicy


def demo_report_print(
    *,
    say: Say,
    experiment: Experiment,
    before_command: float | None,
    fetch_s: float,
    total_s: float,
    port: int,
    policy: SlicePolicy | None,
    decision: Decision | None,
) -> None:
    """The time budget (seconds: before the command, model fetch, the runs' phases, the rest of
    ``total_s``), the comparison, policy and decision URLs, and the demo logins."""
    say.heading("time budget")
    budget = experiment_budget(experiment=experiment, before_command=before_command, fetch=fetch_s, total=total_s)
    for line in budget_lines(budget):
        say(line)
    say(f"comparison: http://127.0.0.1:{port}/analysis/experiments/{experiment.pk}/")
    if policy is not None:
        say(f"slice policy: http://127.0.0.1:{port}/policies/{policy.pk}/")
    if decision is not None:
        say(f"decision: http://127.0.0.1:{port}/decisions/{decision.pk}/ ({decision.status})")
    say(
        f"log in as demo / {DEMO_PASSWORD} (approver: signs the decision); demo-engineer (drafts) and "
        f"demo-viewer (reads, no raw text) have the same password; all three are the team {DEMO_TEAM!r}, "
        "which owns the demo's trace and everything made from it"
    )
