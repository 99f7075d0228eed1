"""A progress bar over an experiment's requests until it ends (the demo, ``run_experiment --wait``)."""

from __future__ import annotations

import time

from tqdm import tqdm

from console.experiments.models import Experiment
from console.experiments.selectors import experiment_progress


def experiment_follow(experiment_id: int, *, stdout, poll_s: float = 1.0) -> str:
    """Show a progress bar (requests done over all runs) until the experiment ends; returns its
    status. ``poll_s``: seconds between reads."""
    experiment = Experiment.objects.get(pk=experiment_id)
    progress = experiment_progress(experiment=experiment)
    with tqdm(
        total=progress.requests_total, unit="req", desc=f"experiment {experiment_id}", file=stdout
    ) as bar:
        while True:
            experiment.refresh_from_db()
            progress = experiment_progress(experiment=experiment)
            bar.set_postfix_str(
                f"runs {progress.runs_done}/{progress.runs_total} failed {progress.runs_failed}"
            )
            bar.update(progress.requests_done - bar.n)
            if experiment.status not in (Experiment.Status.RUNNING, Experiment.Status.DRAFT):
                return experiment.status
            time.sleep(poll_s)
