"""Step 5: a slice policy fitted on the demo's train split and scored on its holdout."""

from __future__ import annotations

from console.demo.output import Say
from console.experiments.models import Experiment
from console.policies.models import SlicePolicy
from console.policies.selectors import PolicyInputError
from console.policies.services import policy_fit

# A slice needs this many train requests to get a rule of its own (the default demo has 8 train
# requests, 4 per traffic class): small, so the holdout score is what tells whether a rule holds.
POLICY_MIN_SUPPORT = 4


def demo_policy_fit(*, say: Say, experiment: Experiment, engineer) -> SlicePolicy | None:
    """Fit a slice policy on the train split, scored on holdout (None, said why, if it cannot)."""
    try:
        policy = policy_fit(experiment=experiment, created_by=engineer, min_support=POLICY_MIN_SUPPORT)
    except PolicyInputError as exc:
        say.warning(f"  no policy: {exc}")
        return None
    rules = policy.rules.get("rules") or []
    on = [r for r in rules if r.get("speculative_config")]
    say(
        f"  policy {policy.pk}: {len(rules)} rule(s), {len(on)} turning speculation on; fitted on train "
        f"({policy.train_scores.get('n_requests')} requests), scored on holdout "
        f"({policy.holdout_scores.get('n_requests')} requests)"
    )
    for rule in rules:
        when = ", ".join(f"{k}={v}" for k, v in (rule.get("when") or {}).items()) or "everything else"
        say(f"    {when}: {rule.get('arm') or 'baseline'}")
    return policy
