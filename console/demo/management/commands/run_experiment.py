"""Define (and run) an experiment from a pipeline.

In the demo app (the top edge) since ``--worker`` starts the embedded worker
(``workers/embedded.py``) itself; without it the command only defines, starts and follows."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from django.core.management.base import BaseCommand, CommandError

from console.demo.follow import experiment_follow
from console.experiments.models import Experiment
from console.experiments.services import ExperimentInvalid, experiment_create, experiment_start
from console.traces.models import TRAFFIC_CLASSES, Trace
from workers.embedded import Interrupted, embedded_worker, interrupt_signals


def config_load(text: str, *, what: str) -> dict:
    """CONFIG is a JSON/YAML file path or inline JSON."""
    path = Path(text)
    try:
        if path.exists():
            data = (
                yaml.safe_load(path.read_text())
                if path.suffix in (".yaml", ".yml")
                else json.loads(path.read_text())
            )
        else:
            data = json.loads(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise CommandError(f"{what}: {text!r} is neither a readable file nor valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CommandError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


def candidate_normalise(data: dict) -> dict:
    """Accept a candidate as {"speculative_config": {...}} or as the speculative config itself."""
    if "speculative_config" in data:
        return data
    return {"speculative_config": data}


class Command(BaseCommand):
    help = "Define an experiment (baseline vs candidates on one trace) and start it; --wait follows it."

    def add_arguments(self, parser):
        parser.add_argument("--trace", type=int, required=True, help="trace id")
        parser.add_argument(
            "--baseline",
            required=True,
            help='CONFIG: {"engine": "hf", "target_model": ..., "engine_args": {...}}',
        )
        parser.add_argument(
            "--candidate", action="append", default=[], help="CONFIG (repeatable): a speculative_config"
        )
        parser.add_argument("--load", default="1x", help="load levels, e.g. 0.5x,1x,2x/c4")
        parser.add_argument("--repeats", type=int, default=3)
        parser.add_argument("--warmup", type=int, default=1)
        parser.add_argument("--split", default="all", choices=["all", "train", "holdout"])
        parser.add_argument("--output-limit", type=int)
        parser.add_argument(
            "--output-buckets",
            help="buckets of recorded output length as a matrix axis, edge:limit each, e.g. 0:64,64:256,256:1024",
        )
        parser.add_argument("--sampling", default="trace", choices=["trace", "greedy"])
        parser.add_argument("--deadlines", help="JSON, seconds per class")
        parser.add_argument("--cost-per-hour", type=float, default=0.0, help="USD per accelerator-hour")
        parser.add_argument(
            "--promised-class", default="interactive", choices=list(TRAFFIC_CLASSES),
            help="declared endpoint: the class the release promises a latency benefit to",
        )
        parser.add_argument(
            "--primary", default="tpot_s:p95",
            help="declared primary latency metric:stat the gate judges (default tpot_s:p95)",
        )
        parser.add_argument(
            "--capacity-search",
            action="store_true",
            help="per arm and repeat, bisect the arrival rate for the highest multiplier meeting --slo (docs/capacity.md)",
        )
        parser.add_argument(
            "--slo",
            help='capacity SLO as JSON: {"traffic_class": "interactive", "attainment": 0.99, "p95_tpot_s": 0.2, '
            '"p95_e2e_s": 10} (at least one bound; needs --capacity-search)',
        )
        parser.add_argument(
            "--capacity-bracket", default="0.25:16", help="LO:HI rate multipliers the search bisects (default 0.25:16)"
        )
        parser.add_argument("--capacity-steps", type=int, default=5, help="steps per search, 1-8 (default 5)")
        parser.add_argument("--name")
        parser.add_argument(
            "--wait", action="store_true", help="show a progress bar; exit 1 if any run failed"
        )
        parser.add_argument(
            "--worker",
            action="store_true",
            help="start a worker here that serves this experiment only and stops with the command "
            "(implies --wait)",
        )

    def handle(self, *args, **opts):
        trace = Trace.objects.filter(pk=opts["trace"]).first()
        if trace is None:
            raise CommandError(f"--trace: no trace with id {opts['trace']}")
        baseline = config_load(opts["baseline"], what="--baseline")
        if baseline.get("speculative_config"):
            raise CommandError("--baseline: the baseline must not have a speculative_config")
        candidates = [candidate_normalise(config_load(c, what="--candidate")) for c in opts["candidate"]]
        capacity_search = capacity_search_option(opts)
        try:
            experiment = experiment_create(
                name=opts["name"] or f"{trace.name}: {len(candidates)} candidate(s)",
                trace=trace,
                engine=baseline.get("engine", "hf"),
                target_model=baseline.get("target_model", ""),
                baseline_engine_args=baseline.get("engine_args", {}),
                candidates=candidates,
                load_levels=opts["load"],
                repeats=opts["repeats"],
                warmup=opts["warmup"],
                split=opts["split"],
                output_limit=opts["output_limit"],
                output_buckets=opts["output_buckets"],
                sampling=opts["sampling"],
                deadlines=json.loads(opts["deadlines"]) if opts["deadlines"] else None,
                cost_per_hour_usd=opts["cost_per_hour"],
                endpoints={
                    "promised_class": opts["promised_class"],
                    "primary_metric": opts["primary"].partition(":")[0],
                    "primary_stat": opts["primary"].partition(":")[2] or "p95",
                },
                capacity_search=capacity_search,
            )
        except ExperimentInvalid as exc:
            lines = [f"  {field}: {m}" for field, messages in exc.errors.items() for m in messages]
            raise CommandError("invalid experiment:\n" + "\n".join(lines), returncode=2) from None
        if opts["worker"]:
            status = self._run_with_worker(experiment)
        else:
            n = experiment_start(experiment=experiment)
            self.stdout.write(f"experiment {experiment.pk}: {n} runs queued")
            if not opts["wait"]:
                return
            status = experiment_follow(experiment.pk, stdout=self.stdout)
        if status != Experiment.Status.DONE:
            raise CommandError(
                f"experiment {experiment.pk} ended {status}; see /experiments/{experiment.pk}/"
            )

    def _run_with_worker(self, experiment: Experiment) -> str:
        """Start a worker that serves this experiment's queue only, follow it, stop the worker.

        Implies --wait. Ctrl-C, SIGTERM or a closed terminal stops the worker too, and the
        experiment's unfinished runs end ``cancelled`` with the reason.
        """
        try:
            with (
                interrupt_signals(),
                embedded_worker(experiment_id=experiment.pk, owner="run_experiment") as worker,
            ):
                n = experiment_start(experiment=experiment, queue=worker.queue)
                self.stdout.write(f"experiment {experiment.pk}: {n} runs queued on {worker.queue}")
                return experiment_follow(experiment.pk, stdout=self.stdout)
        except Interrupted as exc:
            raise CommandError(
                f"interrupted ({exc.signame}): the worker is stopped and experiment {experiment.pk}'s "
                "unfinished runs are cancelled",
                returncode=128 + exc.signum,
            ) from None


def capacity_search_option(opts: dict) -> dict | None:
    """The ``capacity_search`` option from ``--capacity-search``, ``--slo``, ``--capacity-bracket``
    and ``--capacity-steps`` (the service validates the values)."""
    if not opts.get("capacity_search"):
        if opts.get("slo"):
            raise CommandError("--slo: only with --capacity-search", returncode=2)
        return None
    if not opts.get("slo"):
        raise CommandError('--capacity-search needs --slo, e.g. --slo \'{"attainment": 0.99}\'', returncode=2)
    try:
        slo = json.loads(opts["slo"])
    except json.JSONDecodeError as exc:
        raise CommandError(f"--slo: not valid JSON ({exc.msg} at column {exc.colno})", returncode=2) from None
    lo, sep, hi = str(opts.get("capacity_bracket") or "").partition(":")
    try:
        bracket = (float(lo), float(hi)) if sep else None
    except ValueError:
        bracket = None
    if bracket is None:
        raise CommandError(f"--capacity-bracket: LO:HI rate multipliers, e.g. 0.25:16, got {opts['capacity_bracket']!r}", returncode=2)
    return {"slo": slo, "lo": bracket[0], "hi": bracket[1], "steps": opts["capacity_steps"]}

