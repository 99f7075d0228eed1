"""Fit a slice policy from the command line, as a pipeline does: the same checks as the fit form
and ``POST /api/policies``; prints what was fitted, or one export of it to stdout.

    manage.py fit_policy EXPERIMENT_ID --user NAME [--arms A B] [--load 2x|all] [--metric tpot_s]
        [--features task traffic_class] [--min-support 10] [--ci 0.95]
        [--export summary|json|rules|vllm|litellm|schedule]
"""

from __future__ import annotations

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from console.accounts.roles import RUN_EXPERIMENT
from console.jsonutil import canonical_json
from console.numbers import milliseconds
from console.policies import deploy, schedule_page
from console.policies.fit_request import PolicyFitRefused, policy_fit_checked
from console.policies.selectors import policy_deployment, policy_export, policy_holdout_warning

EXPORTS = ("summary", "json", "rules", "vllm", "litellm", "schedule")


class Command(BaseCommand):
    help = (
        "Fit a slice policy on an experiment's train split, score it on the holdout, print it or an export."
    )

    def add_arguments(self, parser):
        parser.add_argument("experiment", type=int, help="the experiment's id")
        parser.add_argument("--user", required=True, help="who fits it (needs the run-experiment permission)")
        parser.add_argument(
            "--arms", nargs="+", help="candidate arms to choose among (default: every candidate)"
        )
        parser.add_argument(
            "--load", help='a load level label, or "all" to pool every level (default: the first)'
        )
        parser.add_argument("--metric", help="the per-request saving to maximise (default: tpot_s)")
        parser.add_argument(
            "--features", nargs="+", help="features known before execution (default: the form's)"
        )
        parser.add_argument(
            "--min-support", type=int, dest="min_support", help="train requests a slice needs"
        )
        parser.add_argument("--ci", type=float, help="interval level (default 0.95)")
        parser.add_argument(
            "--export", choices=EXPORTS, default="summary", help="what to print (default: summary)"
        )

    def handle(self, *args, experiment, user, export, **options):
        actor = get_user_model().objects.filter(username=user, is_active=True).first()
        if actor is None:
            raise CommandError(f"--user {user!r}: no active user of that name")
        if not actor.has_perm(RUN_EXPERIMENT):
            raise CommandError(
                f"--user {user!r} may not fit policies (needs {RUN_EXPERIMENT}: an engineer or approver "
                "of the experiment's team)"
            )
        names = ("arms", "load", "metric", "features", "min_support", "ci")
        fields = {"experiment": experiment} | {k: options[k] for k in names if options.get(k) is not None}
        try:
            policy = policy_fit_checked(fields=fields, created_by=actor)
        except PolicyFitRefused as exc:
            where = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.details.items())
            raise CommandError(f"{exc.message}{': ' + where if where else ''}") from None
        if export == "summary":
            self._summary(policy)
        elif export == "json":
            self.stdout.write(json.dumps(policy_export(policy=policy), indent=2, sort_keys=True, default=str))
        elif export == "rules":
            self.stdout.write(canonical_json(policy.rules))
        elif export == "schedule":  # the experiment's draft length by batch size (docs/policies.md)
            view = schedule_page.experiment_schedule(experiment=policy.experiment)
            self.stdout.write(json.dumps(schedule_page.schedule_document(view), indent=2))
        else:
            try:
                deployment = policy_deployment(policy=policy)
            except deploy.DeployError as exc:
                raise CommandError(f"policy {policy.pk} cannot be deployed: {exc}") from None
            self.stdout.write(
                deploy.serve_script(deployment) if export == "vllm" else deploy.router_yaml(deployment)
            )

    def _summary(self, policy) -> None:
        say = self.stdout.write
        say(f"policy {policy.pk} on experiment {policy.experiment_id}: rules sha256 {policy.rules_sha256}")
        for name, scores in (("train", policy.train_scores or {}), ("holdout", policy.holdout_scores or {})):
            routed = scores.get("policy") or {}
            lo, hi = routed.get("lo"), routed.get("hi")
            interval = (
                f" [{milliseconds(lo, signed=True)}, {milliseconds(hi, signed=True)}]"
                if lo is not None
                else ""
            )
            say(
                f"  {name}: saving per request {milliseconds(routed.get('benefit'), signed=True)}{interval}"
                f" (n={routed.get('n', 0)})"
            )
        warning = policy_holdout_warning(policy=policy)
        if warning is not None:
            lo, hi = milliseconds(warning["lo_s"], signed=True), milliseconds(warning["hi_s"], signed=True)
            say(
                f"  WARNING: on holdout, {warning['label']} beats this policy by "
                f"{milliseconds(warning['delta_s'], signed=True)} [{lo}, {hi}] per request (n={warning['n']}); "
                f"store it as a policy: POST {warning['offer']['api']} "
                f'{{"alternative": "{warning["alternative"]}"}} or the button on the page'
            )
        say(
            f"  page /policies/{policy.pk}/ · API /api/policies/{policy.pk} · exports: --export rules|vllm|litellm"
        )
