"""The main job on the embedded default, end to end.

Fetches the demo models (progress bars), imports the demo trace shipped in the repo, defines
baseline vs n-gram (k = 2, 4, 8) vs a draft model at two load levels, runs it on a worker
it starts itself, prints the comparison URL and headline numbers, then serves the console.
Each step is a module of ``console.demo`` (plan, trace, experiment, worker, compare, policy,
decision, report); this command parses the options and calls them in order.

A clean start by default: runs that earlier commands left unfinished are cancelled (and said
so) and the embedded broker's pending messages are purged; ``--resume`` continues the last
interrupted demo instead. Stopping the demo (Ctrl-C, SIGTERM, a closed terminal) stops its
worker and ends the runs in flight ``cancelled`` with the reason (``workers/embedded.py``).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from console.accounts.services import team_resolve, user_create
from console.demo.compare import demo_summary_print
from console.demo.decision import demo_decision_draft
from console.demo.experiment import demo_experiment_create, demo_leftovers_cancel, demo_resumable
from console.demo.output import Say
from console.demo.plan import DEMO_PASSWORD, DEMO_TEAM, DEMO_USERS, plan_build
from console.demo.policy import demo_policy_fit
from console.demo.report import demo_report_print
from console.demo.trace import demo_trace_import
from console.demo.worker import demo_experiment_run
from console.experiments.models import Experiment
from console.static_files import static_collect_if_stale
from workers.catalog.resolve import model_fetch
from workers.embedded import Interrupted, interrupt_signals

# `make demo` writes the time it started (seconds since the epoch) so the budget can count the
# install and migrate that ran before this command.
STARTED_ENV = "SPECREVIEW_DEMO_T0"


class Command(BaseCommand):
    help = "Run the demo experiment on the embedded default, print a summary, serve the console."

    def add_arguments(self, parser):
        parser.add_argument("--no-serve", action="store_true", help="run the job, print the summary, exit")
        parser.add_argument(
            "--full",
            action="store_true",
            help="the Qwen2.5-Coder 1.5B target with its 0.5B draft (much longer than the default)",
        )
        # The default demo is now the quick one: kept so `DEMO_ARGS=--quick` still works.
        parser.add_argument(
            "--quick", action="store_true", help="the default (smollm2-135m); kept for old scripts"
        )
        parser.add_argument(
            "--resume",
            action="store_true",
            help="continue the last interrupted demo (of the same kind) instead of a clean start",
        )
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        # For tests, to keep the demo's runs short: the first N requests of the demo trace (all
        # splits), shorter outputs, fewer load levels, fewer n-gram draft lengths, fewer repeats.
        parser.add_argument("--limit-requests", type=int, default=None, help=argparse.SUPPRESS)
        parser.add_argument("--output-limit", type=int, default=None, help=argparse.SUPPRESS)
        parser.add_argument("--loads", default=None, help=argparse.SUPPRESS)
        parser.add_argument("--ngram-k", default=None, help=argparse.SUPPRESS)
        parser.add_argument("--repeats", type=int, default=None, help=argparse.SUPPRESS)

    def handle(self, *args, no_serve, full, quick, resume, port, limit_requests, **options):
        say = Say(self.stdout, self.style)
        if full and quick:
            raise CommandError("--full and --quick: choose one (--quick is the default demo)")
        started_before = self._started_before(say)
        # Inherited by the worker the demo starts: torch's OpenMP threads then sleep instead of
        # spinning while they wait. On a shared 2-core machine (load average 15) spinning made a
        # 300-token SmolLM2 prefill take 46 s wall and 9.3 s CPU against 10 s and 2.5 s passive.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        plan = plan_build(
            full=full,
            limit_requests=limit_requests,
            output_limit=options["output_limit"],
            repeats=options["repeats"],
            loads=options["loads"],
            ngram_k=options["ngram_k"],
        )
        try:
            with interrupt_signals():
                url = self._demo(
                    say=say,
                    plan=plan,
                    full=full,
                    resume=resume,
                    port=port,
                    limit_requests=limit_requests,
                    started_before=started_before,
                )
        except Interrupted as exc:
            raise CommandError(
                f"the demo was interrupted ({exc.signame}); its worker is stopped and its unfinished runs "
                "are cancelled. Run it again for a clean start, or with --resume to continue it.",
                returncode=128 + exc.signum,
            ) from None
        if no_serve:
            return
        if static_collect_if_stale():  # the pages name content-hashed static files (settings.STORAGES)
            say("static files collected into var/staticfiles")
        # Outside interrupt_signals: Ctrl-C here just stops the server, as runserver's own does.
        say(f"serving the console at {url}  (Ctrl-C to stop)")
        call_command("runserver", f"127.0.0.1:{port}", "--noreload")

    def _started_before(self, say: Say) -> float | None:
        """Seconds between `make demo` starting (SPECREVIEW_DEMO_T0) and this command, or None."""
        raw = os.environ.get(STARTED_ENV, "").strip()
        if not raw:
            return None
        try:
            seconds = time.time() - float(raw)
        except ValueError:
            seconds = float("nan")
        if not 0 <= seconds < 86400:  # also catches nan and a clock far off
            say.warning(
                f"{STARTED_ENV}={raw!r} is not a start time (seconds since the epoch, within the last day): "
                "the budget leaves the install out"
            )
            return None
        return seconds

    def _demo(self, *, say: Say, plan: dict[str, Any], full, resume, port, limit_requests, started_before) -> str:
        """Run the demo experiment to its end, fit a policy, draft a decision; returns the URL."""
        name = f"demo: {plan['target']}{' (full)' if full else ''}"
        t0 = time.monotonic()
        resumed = demo_resumable(name=name) if resume else None
        if resume and resumed is None:
            raise CommandError(
                f"--resume: no interrupted {name!r} experiment to continue; run the demo without --resume"
            )
        team = team_resolve(DEMO_TEAM, create=True)
        users = {
            role: user_create(username=u, password=DEMO_PASSWORD, role=role, team=team) for u, role in DEMO_USERS
        }
        say.heading("1/6 models")
        for model in filter(None, (plan["target"], plan["draft"])):
            path = model_fetch(name=model, progress=True)
            say(f"  {model}: {path}")
        fetch_s = time.monotonic() - t0
        say.heading("2/6 trace")
        trace = demo_trace_import(
            uploaded_by=users["engineer"], limit_requests=limit_requests or plan["requests"], team=team
        )
        say(f"  trace {trace.pk}: {trace.name}, {trace.request_count} requests")

        demo_leftovers_cancel(say=say, keep=resumed)
        experiment = (
            resumed
            if resumed is not None
            else demo_experiment_create(name=name, plan=plan, trace=trace, engineer=users["engineer"])
        )
        verb = "resuming" if resumed is not None else "running"
        say.heading(f"3/6 experiment {experiment.pk}: {experiment.runs.count()} runs ({verb})")
        status, log_path = demo_experiment_run(
            say=say, experiment=experiment, resumed=resumed is not None, stdout=self.stdout
        )
        experiment.refresh_from_db()
        say.heading(f"4/6 summary ({time.monotonic() - t0:.0f} s)")
        demo_summary_print(say=say, experiment=experiment)
        if status != Experiment.Status.DONE:
            url = f"http://127.0.0.1:{port}/analysis/experiments/{experiment.pk}/"
            say(f"comparison: {url}")
            raise CommandError(f"the demo experiment ended {status}: see {url} and {log_path}")
        say.heading("5/6 slice policy")
        policy = demo_policy_fit(say=say, experiment=experiment, engineer=users["engineer"])
        say.heading("6/6 decision")
        decision = demo_decision_draft(
            say=say, experiment=experiment, policy=policy, engineer=users["engineer"]
        )
        demo_report_print(
            say=say,
            experiment=experiment,
            before_command=started_before,
            fetch_s=fetch_s,
            total_s=(started_before or 0.0) + time.monotonic() - t0,
            port=port,
            policy=policy,
            decision=decision,
        )
        return f"http://127.0.0.1:{port}/"
