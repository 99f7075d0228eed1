"""Step 3: the demo experiment run to its end on a worker the demo starts for it alone."""

from __future__ import annotations

from pathlib import Path

from console.demo.experiment import demo_runs_resume
from console.demo.follow import experiment_follow
from console.demo.output import Say
from console.experiments.models import Experiment
from console.experiments.services import experiment_start
from workers.embedded import embedded_worker


def demo_experiment_run(*, say: Say, experiment: Experiment, resumed: bool, stdout) -> tuple[str, Path]:
    """Start an embedded worker on the experiment's own queue, queue its runs (a resumed one:
    only those that did not finish), follow it to its end and stop the worker. Returns the
    experiment's final status and the worker's log file."""
    with embedded_worker(experiment_id=experiment.pk, owner="the demo") as worker:
        if resumed:
            demo_runs_resume(say=say, experiment=experiment, queue=worker.queue)
        else:
            experiment_start(experiment=experiment, queue=worker.queue)
        status = experiment_follow(experiment.pk, stdout=stdout)
    return status, worker.log_path
