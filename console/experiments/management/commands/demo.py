"""The main job on the embedded default, end to end.

Fetches the demo models (progress bars), imports the demo trace shipped in the repo, defines
baseline vs n-gram (k = 2, 4, 8) vs a draft model at two load levels, runs it on a worker
it starts itself, prints the comparison URL and headline numbers, then serves the console.

A clean start by default: runs that earlier commands left unfinished are cancelled (and said
so) and the embedded broker's pending messages are purged; ``--resume`` continues the last
interrupted demo instead. Stopping the demo (Ctrl-C, SIGTERM, a closed terminal) stops its
worker and ends the runs in flight ``cancelled`` with the reason (``workers/embedded.py``).
"""

from __future__ import annotations

import argparse
import io
import os
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from console.accounts.services import user_create

DEMO_USERS = (("demo", "approver"), ("demo-engineer", "engineer"), ("demo-viewer", "viewer"))
DEMO_PASSWORD = "specreview-demo"
# `make demo` writes the time it started (seconds since the epoch) so the budget can count the
# install and migrate that ran before this command.
STARTED_ENV = "SPECREVIEW_DEMO_T0"

# The default demo fits 15 minutes on a 2-core AVX2 laptop without native bf16, install and
# model fetch included (README.md has the measured figure): the smallest target, its number
# format chosen by the hf engine's dtype "auto" (fp32 where the CPU lacks native bf16, from a
# probe cached per host and model), baseline vs n-gram k = 2 and 4, every request of the demo
# trace (train and holdout, so a slice policy can be fitted and scored), two repeats (a noise
# floor) at one load level: 2x the trace's arrival rate keeps the engine busy most of the window
# without queueing minutes of backlog.
DEFAULT: dict[str, Any] = {
    "target": "smollm2-135m",
    "draft": None,
    "engine_args": {"dtype": "auto"},
    "split": "all",
    # The first 20 requests of the demo trace (HumanEval, GSM8K, JSON-schema, tool calls, chat,
    # translation; 8 train, 12 holdout): their arrivals span 72 s, about what SmolLM2 needs to serve
    # them at 16 tokens on 2 quiet cores, so at 2x the engine is near saturation.
    "requests": 20,
    "output_limit": 16,
    "repeats": 2,
    "loads": "2x",
    "ngram_k": [2, 4],
}
# --full: the Qwen2.5-Coder pair (a real target and draft: same tokenizer) with a draft-model arm.
# Not sized for 15 minutes: the 1.5B target decodes about 10x slower than SmolLM2-135M here.
FULL: dict[str, Any] = {
    "target": "qwen2.5-coder-1.5b",
    "draft": "qwen2.5-coder-0.5b",
    "engine_args": {"dtype": "auto"},
    "split": "all",
    "requests": None,
    "output_limit": 32,
    "repeats": 2,
    "loads": "2x",
    "ngram_k": [2, 4],
}
# A slice needs this many train requests to get a rule of its own (the default demo has 8 train
# requests, 4 per traffic class): small, so the holdout score is what tells whether a rule holds.
POLICY_MIN_SUPPORT = 4


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
        from workers.embedded import Interrupted, interrupt_signals

        if full and quick:
            raise CommandError("--full and --quick: choose one (--quick is the default demo)")
        started_before = self._started_before()
        # Inherited by the worker the demo starts: torch's OpenMP threads then sleep instead of
        # spinning while they wait. On a shared 2-core machine (load average 15) spinning made a
        # 300-token SmolLM2 prefill take 46 s wall and 9.3 s CPU against 10 s and 2.5 s passive.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        plan = dict(FULL if full else DEFAULT)
        for flag, value in (
            ("--limit-requests", limit_requests),
            ("--output-limit", options["output_limit"]),
            ("--repeats", options["repeats"]),
        ):
            if value is not None and value < 1:
                raise CommandError(f"{flag}: expected a positive number, got {value}")
        if options["output_limit"]:
            plan["output_limit"] = options["output_limit"]
        if options["repeats"]:
            plan["repeats"] = options["repeats"]
        if options["loads"]:
            plan["loads"] = options["loads"]
        if options["ngram_k"]:
            try:
                plan["ngram_k"] = [int(k) for k in options["ngram_k"].split(",")]
            except ValueError:
                raise CommandError(
                    f"--ngram-k: expected numbers like 2,4, got {options['ngram_k']!r}"
                ) from None
        try:
            with interrupt_signals():
                url = self._demo(
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
        # Outside interrupt_signals: Ctrl-C here just stops the server, as runserver's own does.
        self._say(f"serving the console at {url}  (Ctrl-C to stop)")
        call_command("runserver", f"127.0.0.1:{port}", "--noreload")

    def _started_before(self) -> float | None:
        """Seconds between `make demo` starting (SPECREVIEW_DEMO_T0) and this command, or None."""
        raw = os.environ.get(STARTED_ENV, "").strip()
        if not raw:
            return None
        try:
            seconds = time.time() - float(raw)
        except ValueError:
            seconds = float("nan")
        if not 0 <= seconds < 86400:  # also catches nan and a clock far off
            self._say(
                f"{STARTED_ENV}={raw!r} is not a start time (seconds since the epoch, within the last day): "
                "the budget leaves the install out",
                self.style.WARNING,
            )
            return None
        return seconds

    def _say(self, text: str, style=None) -> None:
        # After SIGHUP the terminal is gone: what is left to do (stopping the worker, cancelling
        # runs) must not fail on a write.
        try:
            self.stdout.write(style(text) if style else text)
        except OSError:
            pass

    def _demo(self, *, plan: dict[str, Any], full, resume, port, limit_requests, started_before) -> str:
        """Run the demo experiment to its end, fit a policy, draft a decision; returns the URL."""
        from console.experiments.models import Experiment
        from console.experiments.services import experiment_create, experiment_start
        from workers.catalog.resolve import model_fetch
        from workers.embedded import embedded_worker

        name = f"demo: {plan['target']}{' (full)' if full else ''}"
        t0 = time.monotonic()
        resumed = self._resumable(name=name) if resume else None
        if resume and resumed is None:
            raise CommandError(
                f"--resume: no interrupted {name!r} experiment to continue; run the demo without --resume"
            )
        users = {role: user_create(username=u, password=DEMO_PASSWORD, role=role) for u, role in DEMO_USERS}
        heading = self.style.MIGRATE_HEADING
        self._say("1/6 models", heading)
        for model in filter(None, (plan["target"], plan["draft"])):
            path = model_fetch(name=model, progress=True)
            self._say(f"  {model}: {path}")
        fetch_s = time.monotonic() - t0
        self._say("2/6 trace", heading)
        trace = self._trace(uploaded_by=users["engineer"], limit_requests=limit_requests or plan["requests"])
        self._say(f"  trace {trace.pk}: {trace.name}, {trace.request_count} requests")

        self._leftovers_cancel(keep=resumed)
        if resumed is not None:
            experiment = resumed
        else:
            experiment = experiment_create(
                name=name,
                trace=trace,
                engine="hf",
                target_model=plan["target"],
                baseline_engine_args=plan["engine_args"],
                candidates=self._candidates(plan),
                load_levels=plan["loads"],
                split=plan["split"],
                output_limit=plan["output_limit"],
                sampling="greedy",
                repeats=plan["repeats"],
                warmup=1,
                hardware_label="embedded CPU",
                cost_per_hour_usd=0.10,
                created_by=users["engineer"],
                notes=(
                    f"Cut to fit a 2-core laptop in minutes: {plan['target']} "
                    f"({plan['engine_args'].get('dtype')}), {trace.request_count} requests of the demo trace "
                    "(train and holdout), "
                    f"output limit {plan['output_limit']} tokens, {plan['repeats']} repeats, load "
                    f"level(s) {plan['loads']}. Outputs this short understate what speculation does on "
                    "long generations: see the fit assessment."
                ),
            )
        runs = experiment.runs.count()
        verb = "resuming" if resumed is not None else "running"
        self._say(f"3/6 experiment {experiment.pk}: {runs} runs ({verb})", heading)
        from console.experiments.management.commands.run_experiment import experiment_follow

        with embedded_worker(experiment_id=experiment.pk, owner="the demo") as worker:
            if resumed is not None:
                self._resume(experiment=experiment, queue=worker.queue)
            else:
                experiment_start(experiment=experiment, queue=worker.queue)
            status = experiment_follow(experiment.pk, stdout=self.stdout)
        experiment.refresh_from_db()
        self._say(f"4/6 summary ({time.monotonic() - t0:.0f} s)", heading)
        summary = self._summary(experiment)
        url = f"http://127.0.0.1:{port}/analysis/experiments/{experiment.pk}/"
        if status != Experiment.Status.DONE:
            self._say(f"comparison: {url}")
            raise CommandError(f"the demo experiment ended {status}: see {url} and {worker.log_path}")
        self._say("5/6 slice policy", heading)
        policy = self._policy(experiment=experiment, engineer=users["engineer"])
        self._say("6/6 decision", heading)
        decision = self._decision(
            experiment=experiment, policy=policy, summary=summary, engineer=users["engineer"]
        )
        self._say("time budget", heading)
        from console.experiments.demo_budget import budget_lines, experiment_budget

        budget = experiment_budget(
            experiment=experiment,
            before_command=started_before,
            fetch=fetch_s,
            total=(started_before or 0.0) + time.monotonic() - t0,
        )
        for line in budget_lines(budget):
            self._say(line)
        self._say(f"comparison: {url}")
        if policy is not None:
            self._say(f"slice policy: http://127.0.0.1:{port}/policies/{policy.pk}/")
        if decision is not None:
            self._say(f"decision: http://127.0.0.1:{port}/decisions/{decision.pk}/ ({decision.status})")
        self._say(
            f"log in as demo / {DEMO_PASSWORD} (approver: signs the decision); demo-engineer (drafts) and "
            "demo-viewer (reads) have the same password"
        )
        return f"http://127.0.0.1:{port}/"

    def _policy(self, *, experiment, engineer):
        """Fit a slice policy on the train split, scored on holdout (None, said why, if it cannot)."""
        from console.policies.selectors import PolicyInputError
        from console.policies.services import policy_fit

        try:
            policy = policy_fit(experiment=experiment, created_by=engineer, min_support=POLICY_MIN_SUPPORT)
        except PolicyInputError as exc:
            self._say(f"  no policy: {exc}", self.style.WARNING)
            return None
        rules = policy.rules.get("rules") or []
        on = [r for r in rules if r.get("speculative_config")]
        self._say(
            f"  policy {policy.pk}: {len(rules)} rule(s), {len(on)} turning speculation on; fitted on train "
            f"({policy.train_scores.get('n_requests')} requests), scored on holdout "
            f"({policy.holdout_scores.get('n_requests')} requests)"
        )
        for rule in rules:
            when = ", ".join(f"{k}={v}" for k, v in (rule.get("when") or {}).items()) or "everything else"
            self._say(f"    {when}: {rule.get('arm') or 'baseline'}")
        return policy

    def _decision(self, *, experiment, policy, summary, engineer):
        """Draft a decision from the evidence (a slice policy if it turns speculation on anywhere,
        else keep it off), complete its rollback plan and the engineer's checklist answers as the
        demo can truthfully give them, and submit it: it waits for the approver."""
        from console.decisions import services
        from console.decisions.selectors import decision_comparison
        from console.policies.selectors import policy_export

        on = [r for r in ((policy.rules.get("rules") or []) if policy else []) if r.get("speculative_config")]
        arms = {a.label: a for a in experiment.arms.all()}
        arm = arms.get(on[0].get("arm")) if on else None
        proposal = "enable_for_slice" if arm is not None else "keep_off"
        try:
            decision = services.decision_create(
                experiment=experiment,
                author=engineer,
                title=f"Speculative decoding for {experiment.name}",
                proposal=proposal,
                candidate_arm=arm,
                traffic_class="interactive",
                rationale=(
                    f"Drafted by the demo from experiment {experiment.pk}: "
                    + (
                        f"the slice policy fitted on train turns {arm.label} on where it paid and holds "
                        "on holdout."
                        if arm is not None
                        else "no slice where speculation paid on train and held on holdout: keep it off."
                    )
                ),
                policy=policy_export(policy=policy) if arm is not None and policy else None,
                policy_ref=f"/policies/{policy.pk}/" if arm is not None and policy else "",
                comparison=decision_comparison(experiment=experiment),
            )
            answers = {
                "production_traces": {
                    "answer": "no",
                    "note": "the demo trace: 30 public benchmark prompts with Poisson arrivals, not production traffic",
                },
                "current_serving_path": {
                    "answer": "no",
                    "note": "measured on the hf engine on this machine's CPU, not a production serving stack",
                },
                "framework_compatibility": {
                    "answer": "yes",
                    "note": "engine and library versions are recorded per run (see the evidence)",
                },
            }
            known = {item["key"] for item in decision.checklist or []}
            decision = services.decision_update(
                decision=decision,
                actor=engineer,
                changes={
                    "checklist_answers": {k: v for k, v in answers.items() if k in known},
                    "rollback_owner": "demo-engineer",
                    "rollback_verification": (
                        "After the revert, the triggers' metrics return under their thresholds for one window "
                        "and the serving config in use matches the revert config."
                    ),
                },
            )
            problems = services.decision_submit_problems(decision=decision)
            if not problems:
                decision = services.decision_submit(decision=decision, actor=engineer)
        except services.DecisionError as exc:
            self._say(f"  no decision: {exc}", self.style.WARNING)
            return None
        self._say(
            f"  decision {decision.pk}: {decision.get_proposal_display()}"
            + (f" ({arm.label})" if arm is not None else "")
            + f"; {decision.status}"
            + (", waiting for the approver (demo)" if decision.status == "submitted" else "")
        )
        if problems:
            self._say(f"  left as a draft: {'; '.join(problems)}", self.style.WARNING)
        return decision

    @staticmethod
    def _candidates(plan: dict) -> list[dict]:
        candidates = [
            {
                "speculative_config": {
                    "method": "ngram",
                    "num_speculative_tokens": plan["ngram_k"],
                    "prompt_lookup_max": 3,
                }
            }
        ]
        if plan["draft"]:
            candidates.append(
                {
                    "speculative_config": {
                        "method": "draft_model",
                        "model": plan["draft"],
                        "num_speculative_tokens": 4,
                    }
                }
            )
        return candidates

    @staticmethod
    def _trace(*, uploaded_by, limit_requests: int | None):
        from console.traces.services import DEMO_TRACE_NAME, DEMO_TRACE_PATH, trace_import, trace_import_demo

        if not limit_requests:
            return trace_import_demo(uploaded_by=uploaded_by).trace
        lines = Path(DEMO_TRACE_PATH).read_bytes().splitlines(keepends=True)[:limit_requests]
        return trace_import(
            file=io.BytesIO(b"".join(lines)),
            name=f"{DEMO_TRACE_NAME} (first {limit_requests})",
            uploaded_by=uploaded_by,
            filename=Path(DEMO_TRACE_PATH).name,
            seed=0,
        ).trace

    @staticmethod
    def _resumable(*, name: str):
        """The last demo experiment of this kind that started and did not finish."""
        from console.experiments.models import Experiment

        return (
            Experiment.objects.filter(name=name)
            .exclude(status__in=[Experiment.Status.DRAFT, Experiment.Status.DONE])
            .order_by("-pk")
            .first()
        )

    def _leftovers_cancel(self, *, keep) -> None:
        """A clean start: earlier experiments' unfinished runs end cancelled, their messages go.

        On the embedded default (filesystem broker, one machine) every running experiment was
        started here, and any message in the broker is a leftover, so all are cancelled and the
        broker is emptied. On a shared database and broker only earlier demos are touched.
        """
        from console.experiments.models import Experiment
        from console.experiments.services import experiment_runs_cancel_leftover
        from workers.embedded import broker_queues_pending, broker_queues_purge, embedded_queue

        embedded = settings.CELERY_BROKER_URL.startswith("filesystem")
        earlier = Experiment.objects.filter(status=Experiment.Status.RUNNING)
        if not embedded:
            earlier = earlier.filter(name__startswith="demo: ")
        if keep is not None:
            earlier = earlier.exclude(pk=keep.pk)
        names = dict(earlier.values_list("pk", "name"))
        cancelled = experiment_runs_cancel_leftover(
            reason="left unfinished by an earlier command; cancelled by a new demo for a clean start "
            "(`demo --resume` continues an interrupted demo instead)",
            experiment_ids=list(names),
        )
        queues = broker_queues_pending() if embedded else set()
        queues |= {embedded_queue(experiment_id=pk) for pk in cancelled}
        if keep is not None:
            queues.add(embedded_queue(experiment_id=keep.pk))  # its runs are queued afresh below
        purged = broker_queues_purge(queues=sorted(queues))
        for pk, n in sorted(cancelled.items()):
            self._say(
                f"  experiment {pk} ({names.get(pk, '?')}): {n} unfinished run(s) cancelled (left over)"
            )
        if purged:
            self._say(f"  broker: {purged} pending message(s) of earlier experiments purged")

    def _resume(self, *, experiment, queue: str) -> None:
        """Queue the runs of an interrupted demo that did not finish; finished runs are kept."""
        from console.experiments.models import Run
        from console.experiments.services import experiment_runs_cancel_leftover, run_retry

        # Runs left queued or running by a demo that died without cleaning up: nobody serves them.
        experiment_runs_cancel_leftover(reason="resumed by a new demo", experiment_ids=[experiment.pk])
        again = 0
        for run in experiment.runs.filter(status__in=[Run.Status.CANCELLED, Run.Status.FAILED]).order_by(
            "order"
        ):
            again += run_retry(run=run, queue=queue)
        done = experiment.runs.filter(status=Run.Status.DONE).count()
        self._say(f"  resuming: {done} run(s) already done are kept, {again} queued again")

    def _summary(self, experiment) -> dict | None:
        """Print the headline table, the A/A noise floor and the fit assessment; returns the
        comparison summary (None when nothing could be compared)."""
        from console.analysis.selectors import experiment_fit_assessment
        from console.analysis.services import comparison_refresh

        self._say(experiment.notes)
        summary = comparison_refresh(experiment_id=experiment.pk)
        if not summary:
            self._say("no finished baseline run: nothing to compare")
            return None
        header = (
            f"{'arm':<24}{'load':>6}{'TPOT p50':>11}{'e2e p95':>10}{'accept':>8}{'tok/pass':>9}{'exact':>7}"
        )
        self._say(header)

        def fmt(value, pattern):
            return pattern.format(value) if value is not None else "—"

        for row in summary["headline"]:
            self._say(
                f"{row['arm'][:23]:<24}{row['load']:>6}"
                f"{fmt(row.get('tpot_s_p50') and row['tpot_s_p50'] * 1000, '{:.0f} ms'):>11}"
                f"{fmt(row.get('e2e_s_p95'), '{:.2f} s'):>10}"
                f"{fmt(row.get('acceptance_rate'), '{:.0%}'):>8}"
                f"{fmt(row.get('accepted_per_pass'), '{:.2f}'):>9}"
                f"{fmt(row.get('exact_match_rate'), '{:.0%}'):>7}"
            )
        floors = [
            f
            for f in summary.get("noise_floor") or []
            if f.get("dimension") is None and f.get("metric") == "tpot_s" and f.get("stat") == "p50"
        ]
        for f in floors:
            self._say(
                f"noise floor (A/A, baseline repeat against repeat) at {f['load']}: TPOT p50 "
                f"{fmt(f.get('noise_floor_rel'), '{:.1%}')} over {f.get('n_repeats')} repeats"
            )
        if not floors:
            self._say("noise floor: not measured (one repeat)")
        fit = experiment_fit_assessment(experiment=experiment)
        self._say(f"fit assessment ({fit.get('stage')}):")
        for condition in fit.get("conditions") or []:
            self._say(f"  {condition.get('title') or condition.get('name')}: {condition.get('verdict')}")
        return summary
