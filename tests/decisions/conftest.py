from __future__ import annotations

import pytest

from console.decisions import services
from console.decisions.models import Decision
from tests.decisions.factories import experiment_make, summary_make, summary_passing

ENGINEER_ANSWERS = {
    "production_traces": {"answer": "yes", "note": "last Tuesday's interactive traffic"},
    "current_serving_path": {"answer": "yes"},
    "framework_compatibility": {"answer": "yes", "note": "hf 5.17, json mode checked"},
}


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """The named users are created per test; PBKDF2 at full strength costs seconds each here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def experiment(db, engineer):
    return experiment_make(created_by=engineer)


def draft_make(*, experiment, author, summary=None, proposal="enable", **kwargs) -> Decision:
    return services.decision_create(
        experiment=experiment,
        author=author,
        title=kwargs.pop("title", "Turn on n-gram speculation for interactive"),
        proposal=proposal,
        candidate_arm=experiment.arms.get(label="ngram") if proposal != "keep_off" else None,
        traffic_class="interactive",
        comparison=summary_make(summary_passing() if summary is None else summary),
        **kwargs,
    )


def draft_complete(decision: Decision, *, actor) -> Decision:
    return services.decision_update(
        decision=decision,
        actor=actor,
        changes={
            "rationale": "p95 TPOT down 40% on interactive traffic, no quality change.",
            "checklist_answers": ENGINEER_ANSWERS,
            "rollback_owner": "serving on-call",
            "rollback_verification": "p95 TPOT back to the baseline's within 15 min",
        },
    )


def submitted_make(*, experiment, author, summary=None, **kwargs) -> Decision:
    decision = draft_complete(
        draft_make(experiment=experiment, author=author, summary=summary, **kwargs), actor=author
    )
    return services.decision_submit(decision=decision, actor=author)


def signed_make(*, experiment, author, signer, verdict="approved", override_reason="", **kwargs) -> Decision:
    decision = submitted_make(experiment=experiment, author=author, **kwargs)
    return services.decision_sign(
        decision=decision, signer=signer, verdict=verdict, comment="go", override_reason=override_reason
    )


@pytest.fixture
def draft(experiment, engineer):
    return draft_make(experiment=experiment, author=engineer)


@pytest.fixture
def submitted(experiment, engineer):
    return submitted_make(experiment=experiment, author=engineer)


@pytest.fixture
def signed(experiment, engineer, approver):
    return signed_make(experiment=experiment, author=engineer, signer=approver)
