"""N of M approvals: a decision needs SPECREVIEW_APPROVALS_REQUIRED (or its own number) of distinct
approvers; each signature is recorded, the last one signs and archives, a rejection is final."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, connection, transaction

from console.decisions import services, signing
from console.decisions.models import ArchiveRecord, AuditEvent, Decision, FrozenDecisionError, SignOff
from console.decisions.selectors import archive_verify, decision_approvals
from console.errors import Conflict
from tests.conftest import PASSWORD
from tests.decisions.conftest import draft_complete, draft_make, submitted_make


@pytest.fixture
def third_approver(db):
    from console.accounts.services import user_create

    return user_create(username="kim-approver", password=PASSWORD, role="approver")


def _sign(decision, signer, verdict="approved", **kwargs):
    return signing.decision_sign(decision=decision, signer=signer, verdict=verdict, comment="ok", **kwargs)


def test_it_takes_the_deployment_s_number_at_submission_and_keeps_it(experiment, engineer, settings):
    settings.SPECREVIEW_APPROVALS_REQUIRED = 3
    draft = draft_make(experiment=experiment, author=engineer)
    assert draft.approvals_required is None and draft.approvals_needed == 3
    decision = submitted_make(experiment=experiment, author=engineer)
    assert decision.approvals_required == 3
    settings.SPECREVIEW_APPROVALS_REQUIRED = 1  # a later change does not move a decision in flight
    decision.refresh_from_db()
    assert decision.approvals_needed == 3
    event = decision.events.get(action="submitted")
    assert event.details == {"approvals_required": 3}


def test_a_draft_s_own_number_overrides_the_deployment_s(experiment, engineer, settings):
    settings.SPECREVIEW_APPROVALS_REQUIRED = 3
    decision = submitted_make(experiment=experiment, author=engineer, approvals_required=2)
    assert decision.approvals_required == 2


@pytest.mark.parametrize("value", [0, 11, True, "2"])
def test_it_refuses_a_number_outside_one_to_ten(draft, engineer, value):
    with pytest.raises(services.DecisionError, match="approvals_required"):
        services.decision_update(decision=draft, actor=engineer, changes={"approvals_required": value})


def test_the_first_approval_of_two_is_recorded_and_the_second_signs(
    experiment, engineer, approver, second_approver
):
    decision = submitted_make(experiment=experiment, author=engineer, approvals_required=2)
    after_one = _sign(decision, approver)
    assert after_one.status == Decision.Status.SUBMITTED
    assert decision_approvals(decision=after_one)["label"] == "1 of 2 approvals"
    assert not ArchiveRecord.objects.exists()
    event = after_one.events.get(action=AuditEvent.Action.APPROVAL)
    assert event.details["label"] == "approval 1 of 2" and event.actor == approver
    signed = _sign(decision, second_approver)
    assert signed.status == Decision.Status.APPROVED and signed.signoff.signer == second_approver
    assert signed.events.get(action=AuditEvent.Action.SIGNED).details["label"] == "approval 2 of 2"
    bundle = json.loads(ArchiveRecord.objects.get(decision=signed).bundle)
    assert [s["signer_username"] for s in bundle["signoffs"]] == ["alex-approver", "sam-approver"]
    assert bundle["approvals_required"] == 2 and bundle["names"]["signer"] == "sam-approver"
    assert archive_verify()["ok"]


def test_the_same_approver_cannot_sign_twice(experiment, engineer, approver):
    decision = submitted_make(experiment=experiment, author=engineer, approvals_required=2)
    _sign(decision, approver)
    with pytest.raises(services.DecisionError, match="already signed"):
        _sign(decision, approver)
    assert SignOff.objects.filter(decision=decision).count() == 1


def test_no_drafter_editor_or_submitter_may_add_a_signature(experiment, engineer, approver, second_approver):
    decision = draft_make(experiment=experiment, author=engineer, approvals_required=2)
    services.decision_update(decision=decision, actor=approver, changes={"rationale": "p95 TPOT down 40%."})
    decision = services.decision_submit(decision=draft_complete(decision, actor=engineer), actor=engineer)
    with pytest.raises(PermissionDenied, match="edited"):
        _sign(decision, approver)
    assert _sign(decision, second_approver).status == Decision.Status.SUBMITTED


def test_a_rejection_is_final_at_once(experiment, engineer, approver, second_approver, third_approver):
    decision = submitted_make(experiment=experiment, author=engineer, approvals_required=3)
    _sign(decision, approver)
    rejected = _sign(decision, second_approver, verdict="rejected")
    assert (
        rejected.status == Decision.Status.REJECTED
        and ArchiveRecord.objects.filter(decision=decision).exists()
    )
    with pytest.raises(Conflict, match="already signed by alex-approver and sam-approver"):
        _sign(decision, third_approver)


def test_any_approval_with_conditions_makes_the_decision_conditional_with_every_condition(
    experiment, engineer, approver, second_approver
):
    decision = submitted_make(experiment=experiment, author=engineer, approvals_required=2)
    _sign(decision, approver, verdict="approved_with_conditions", conditions="watch p99 for a week")
    signed = _sign(decision, second_approver, verdict="approved")
    assert signed.status == Decision.Status.APPROVED_WITH_CONDITIONS
    assert decision_approvals(decision=signed)["conditions"] == [
        {"signer": "alex-approver", "conditions": "watch p99 for a week"}
    ]


def test_every_approval_over_a_failing_gate_needs_its_override_reason(
    experiment, engineer, approver, second_approver
):
    from tests.decisions.test_services import failing_summary

    decision = submitted_make(
        experiment=experiment, author=engineer, summary=failing_summary(), approvals_required=2
    )
    _sign(decision, approver, override_reason="accepted risk, ticket 12")
    with pytest.raises(services.DecisionError, match="override reason"):
        _sign(decision, second_approver)
    signed = _sign(decision, second_approver, override_reason="agreed, ticket 12")
    assert [s.override_reason for s in signed.signatures()] == [
        "accepted risk, ticket 12",
        "agreed, ticket 12",
    ]


@pytest.mark.django_db(transaction=True)
def test_a_signature_of_a_waiting_decision_refuses_update_and_delete_in_the_database(
    experiment, engineer, approver
):
    decision = submitted_make(experiment=experiment, author=engineer, approvals_required=2)
    _sign(decision, approver)
    signature = SignOff.objects.get(decision=decision)
    with pytest.raises(FrozenDecisionError):
        signature.delete()
    for sql in ("UPDATE decisions_signoff SET comment = 'forged'", "DELETE FROM decisions_signoff"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(sql)
    assert SignOff.objects.get(decision=decision).comment == "ok"


def test_the_page_shows_one_of_two_and_then_every_signature(
    experiment, engineer, approver, second_approver, approver_client
):
    decision = submitted_make(experiment=experiment, author=engineer, approvals_required=2)
    data = {"verdict": "approved", "comment": "looks right"}
    response = approver_client.post(f"/decisions/{decision.pk}/sign/", data, follow=True)
    body = response.content.decode()
    assert "Signature recorded: 1 of 2 approvals" in body and 'id="signed-by-you"' in body
    _sign(decision, second_approver)
    body = approver_client.get(f"/decisions/{decision.pk}/").content.decode()
    assert 'id="signatures"' in body and "alex-approver" in body and "sam-approver" in body
    markdown = approver_client.get(f"/decisions/{decision.pk}/export.md").content.decode()
    assert "Approvals required: 2 (2 given)" in markdown
    assert "by alex-approver" in markdown and "by sam-approver" in markdown


def test_the_edit_form_sets_the_number(draft, engineer_client):
    from console.decisions.forms import DecisionEditForm

    data = {k: v for k, v in DecisionEditForm.initial_for(draft).items() if v is not None}
    response = engineer_client.post(f"/decisions/{draft.pk}/edit/", data | {"approvals_required": "4"})
    assert response.status_code == 302, response.content.decode()[:2000]
    draft.refresh_from_db()
    assert draft.approvals_required == 4
    response = engineer_client.post(f"/decisions/{draft.pk}/edit/", data | {"approvals_required": "11"})
    assert response.status_code == 200 and b"approvals_required" in response.content


def test_verify_archive_names_a_first_signature_rewritten_behind_the_archive(
    experiment, engineer, approver, second_approver, capsys
):
    from tests.decisions.test_archive import run_verify, tamper

    decision = submitted_make(experiment=experiment, author=engineer, approvals_required=2)
    _sign(decision, approver)
    _sign(decision, second_approver)
    assert run_verify(capsys)[0] == 0
    first = SignOff.objects.get(decision=decision, signer=approver)
    tamper(f"UPDATE decisions_signoff SET comment = 'forged' WHERE id = {first.pk}")
    code, message = run_verify(capsys)
    assert code == 1 and "the sign-offs in the database differ from their archived bundle" in message
