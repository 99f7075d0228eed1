"""``manage.py calibrate``: do the comparison's intervals hold their coverage, and does the gate
refuse an A/A experiment? Simulated experiments with a known truth (see
``console.decisions.calibration``). ``--sequential``: the same for the run-until-decided
stopping rule (``console.decisions.calibration_sequential``)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from console.analysis.metrics import requests_derive
from console.decisions.calibration import calibrate, pool_from_results, pool_shipped
from console.decisions.calibration_sequential import SEQ_REQUESTS, calibrate_sequential
from console.experiments.models import Run
from console.results.selectors import results_frames


def _pool_from_db(experiment_id: int | None):
    query = Run.objects.filter(status=Run.Status.DONE, arm__is_baseline=True).select_related("arm", "experiment")
    if experiment_id is not None:
        query = query.filter(experiment_id=experiment_id)
    runs = list(query.order_by("-experiment__created_at", "repeat"))
    if not runs:
        return None
    newest = runs[0].experiment_id
    chosen = [r for r in runs if r.experiment_id == newest and r.load_label == runs[0].load_label]
    requests, _ = results_frames(runs=chosen)
    derived = requests_derive(requests, deadlines=None)
    source = f"experiment {newest}, baseline at load {runs[0].load_label} ({len(chosen)} run(s))"
    return pool_from_results(derived, source=source)


class Command(BaseCommand):
    help = (
        "Simulate A/A and planted-effect experiments (1, 3, 5 repeats x 10, 30, 100, 300 requests) by "
        "resampling recorded per-request results, run the comparison and the gate on them, and report "
        "interval coverage, false significance and how often the gate passes an A/A."
    )

    def add_arguments(self, parser):
        parser.add_argument("--sims", type=int, default=200, help="simulations per scenario (default 200)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates per comparison")
        parser.add_argument(
            "--pool",
            default="auto",
            help="auto (newest finished baseline run, else the shipped recording), shipped, or an experiment id",
        )
        parser.add_argument("--repeats", default="1,3,5", help="comma-separated repeat counts")
        parser.add_argument(
            "--requests", default=None, help="comma-separated requests per arm (default 10,30,100,300; --sequential 100,300)"
        )
        parser.add_argument(
            "--sequential",
            action="store_true",
            help="calibrate the run-until-decided stopping rule (A/A, 20%% and 3%% effects; up to 5 repeats) "
            "against the fixed design with 5 repeats and unadjusted repeated looks",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **opts):
        if opts["sims"] < 1 or opts["n_boot"] < 100:
            raise CommandError("--sims must be >= 1 and --n-boot >= 100")
        try:
            repeats = [int(x) for x in opts["repeats"].split(",") if x.strip()]
            default_requests = ",".join(map(str, SEQ_REQUESTS)) if opts["sequential"] else "10,30,100,300"
            requests = [int(x) for x in (opts["requests"] or default_requests).split(",") if x.strip()]
        except ValueError:
            raise CommandError("--repeats and --requests: comma-separated integers") from None
        if not repeats or not requests or min(repeats) < 1 or min(requests) < 2 or max(requests) > 100_000:
            raise CommandError("--repeats >= 1, --requests between 2 and 100000")
        pool = None
        if opts["pool"] == "auto":
            pool = _pool_from_db(None)
        elif opts["pool"] != "shipped":
            try:
                pool = _pool_from_db(int(opts["pool"]))
            except ValueError:
                raise CommandError("--pool: auto, shipped or an experiment id") from None
            if pool is None:
                raise CommandError(f"--pool: experiment {opts['pool']} has no finished baseline run")
        if pool is None:
            pool = pool_shipped()

        def progress(name: str, seconds: float) -> None:
            if not opts["json"]:
                self.stderr.write(f"  {name}: {seconds:.1f} s")

        if not opts["json"]:
            self.stderr.write(f"pool: {pool.source} ({len(pool.frame)} requests, {pool.repeats} repeat(s))")
        if opts["sequential"]:
            seq = calibrate_sequential(
                pool, sims=opts["sims"], seed=opts["seed"], n_boot=opts["n_boot"], requests=requests, progress=progress
            )
            self._sequential_report(seq, as_json=opts["json"])
            return
        result = calibrate(
            pool,
            sims=opts["sims"],
            seed=opts["seed"],
            n_boot=opts["n_boot"],
            repeats=repeats,
            requests=requests,
            progress=progress,
        )
        if opts["json"]:
            self.stdout.write(json.dumps(result, indent=1, allow_nan=False))
            return
        self.stdout.write(
            f"{'scenario':<18}{'metric':<14}{'cover':>7}{'false sig':>10}{'not meas':>9}{'gate pass':>10}"
        )
        for r in result["scenarios"]:

            def f(v):
                return "   -" if v is None else f"{v:.3f}"

            gate = r["gate_false_pass_rate"] if r["gate_false_pass_rate"] is not None else r["gate_pass_rate"]
            self.stdout.write(
                f"{r['name']:<18}{r['metric']:<14}{f(r['coverage']):>7}{f(r['false_significant_rate']):>10}"
                f"{f(r['not_measured_rate']):>9}{f(gate):>10}"
            )
        if result["within_monte_carlo_error"]:
            self.stdout.write("beyond a target by less than two Monte Carlo errors:\n  " + "\n  ".join(result["within_monte_carlo_error"]))
        if result["failures"]:
            self.stdout.write("targets missed:\n  " + "\n  ".join(result["failures"]))
            raise CommandError(f"{len(result['failures'])} target(s) missed beyond Monte Carlo error")
        self.stdout.write("every target met (coverage >= 0.93, false significance <= 0.06, A/A gate pass <= 0.05)")

    def _sequential_report(self, result: dict, *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(result, indent=1, allow_nan=False))
        else:
            self.stdout.write(
                f"{'scenario':<14}{'metric':<13}{'design':<11}{'cover':>7}{'false':>7}{'repeats':>8}"
                f"{'better':>8}{'worse':>7}{'equiv':>7}{'undec':>7}"
            )
            for r in result["scenarios"]:
                self.stdout.write(
                    f"{r['name']:<14}{r['metric']:<13}{r['design']:<11}{r['coverage']:>7.3f}"
                    f"{r['false_decision_rate']:>7.3f}{r['mean_repeats']:>8.2f}{r['better_rate']:>8.3f}"
                    f"{r['worse_rate']:>7.3f}{r['equivalent_rate']:>7.3f}{r['undecided_rate']:>7.3f}"
                )
            if result["within_monte_carlo_error"]:
                self.stdout.write(
                    "beyond a target by less than two Monte Carlo errors:\n  "
                    + "\n  ".join(result["within_monte_carlo_error"])
                )
        if result["failures"]:
            if not as_json:
                self.stdout.write("targets missed:\n  " + "\n  ".join(result["failures"]))
            raise CommandError(f"{len(result['failures'])} target(s) missed beyond Monte Carlo error")
        if not as_json:
            self.stdout.write("sequential and fixed designs: every target met (coverage >= 0.93, false decisions <= 0.06)")
