"""Step 6: a decision drafted from the demo's evidence and submitted: it waits for the approver."""

from __future__ import annotations

from console.decisions.models import Decision
from console.decisions.selectors import decision_comparison
from console.decisions.services import (
    DecisionError,
    decision_create,
    decision_submit,
    decision_submit_problems,
    decision_update,
)
from console.demo.output import Say
from console.experiments.models import Arm, Experiment
from console.policies.models import SlicePolicy
from console.policies.selectors import policy_export

# The engineer's checklist answers, as the demo can truthfully give them.
CHECKLIST_ANSWERS = {
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
ROLLBACK_VERIFICATION = (
    "After the revert, the triggers' metrics return under their thresholds for one window "
    "and the serving config in use matches the revert config."
)


def demo_decision_draft(
    *, say: Say, experiment: Experiment, policy: SlicePolicy | None, engineer
) -> Decision | None:
    """Draft a decision from the evidence (a slice policy if it turns speculation on anywhere,
    else keep it off), complete its rollback plan and the engineer's checklist answers, and
    submit it: it waits for the approver. None (said why) when the decision cannot be made."""
    on = [r for r in ((policy.rules.get("rules") or []) if policy else []) if r.get("speculative_config")]
    arms = {a.label: a for a in experiment.arms.all()}
    arm = arms.get(on[0].get("arm")) if on else None
    try:
        decision = _decision_create(experiment=experiment, policy=policy, arm=arm, engineer=engineer)
        known = {item["key"] for item in decision.checklist or []}
        decision = decision_update(
            decision=decision,
            actor=engineer,
            changes={
                "checklist_answers": {k: v for k, v in CHECKLIST_ANSWERS.items() if k in known},
                "rollback_owner": "demo-engineer",
                "rollback_verification": ROLLBACK_VERIFICATION,
            },
        )
        problems = decision_submit_problems(decision=decision)
        if not problems:
            decision = decision_submit(decision=decision, actor=engineer)
    except DecisionError as exc:
        say.warning(f"  no decision: {exc}")
        return None
    say(
        f"  decision {decision.pk}: {decision.get_proposal_display()}"
        + (f" ({arm.label})" if arm is not None else "")
        + f"; {decision.status}"
        + (", waiting for the approver (demo)" if decision.status == "submitted" else "")
    )
    if problems:
        say.warning(f"  left as a draft: {'; '.join(problems)}")
    return decision


def _decision_create(
    *, experiment: Experiment, policy: SlicePolicy | None, arm: Arm | None, engineer
) -> Decision:
    """The draft: enable ``arm`` for the policy's slice, or keep speculation off (no arm)."""
    return decision_create(
        experiment=experiment,
        author=engineer,
        title=f"Speculative decoding for {experiment.name}",
        proposal="enable_for_slice" if arm is not None else "keep_off",
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
