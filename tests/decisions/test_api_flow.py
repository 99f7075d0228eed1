"""The decision flow over the API alone (issue 25, "the flow from CI"): draft a decision from an
experiment and its slice policy, complete it, submit it, read its gate and sign it with another
person's approver token; every refusal a 400 naming the field, a 404 or a 409, never a 500."""

from __future__ import annotations

import json

import pytest

from console.decisions.models import ArchiveRecord, Decision
from tests.decisions.conftest import ENGINEER_ANSWERS
from tests.support.world import policy_make


@pytest.fixture(autouse=True)
def comparison(monkeypatch):
    from console.decisions import selectors
    from tests.decisions.factories import summary_make, summary_passing

    monkeypatch.setattr(
        selectors, "decision_comparison", lambda *, experiment: summary_make(summary_passing())
    )


def call(client, method, url, body, headers):
    data = {} if body is None else {"data": json.dumps(body), "content_type": "application/json"}
    return getattr(client, method)(url, **data, **headers)


def test_a_token_drafts_completes_submits_and_another_signs(
    client, experiment, engineer, approver, api_token_for
):
    eng, appr = api_token_for(engineer), api_token_for(approver)
    policy = policy_make(experiment, author=engineer)
    body = {
        "experiment": experiment.pk,
        "proposal": "enable_for_slice",
        "traffic_class": "interactive",
        "candidate_arm": "ngram",
        "slice_policy": policy.pk,
        "title": "n-gram for the slice",
    }
    created = call(client, "post", "/api/decisions", body, eng)
    assert created.status_code == 201, created.content
    decision = created.json()
    assert decision["status"] == "draft" and decision["gate"]["overall"] == "incomplete"  # no answers yet
    assert (
        decision["policy_ref"] == f"/policies/{policy.pk}/" and decision["policy"]["rules_sha256"] == "0" * 64
    )
    url = f"/api/decisions/{decision['id']}"
    early = call(client, "post", f"{url}/submit", None, eng)
    assert early.status_code == 400 and early.json()["details"]["problems"]  # what is missing, listed
    patch = {
        "rationale": "p95 TPOT down on interactive traffic",
        "checklist_answers": ENGINEER_ANSWERS,
        "rollback_owner": "serving on-call",
        "rollback_verification": "p95 TPOT back within 15 min",
    }
    assert call(client, "patch", url, patch, eng).status_code == 200
    submitted = call(client, "post", f"{url}/submit", None, eng)
    assert submitted.status_code == 200 and submitted.json()["status"] == "submitted"
    gate = submitted.json()["gate"]  # what a pipeline reads before asking for a signature
    status = {c["key"]: c["status"] for c in gate["criteria"]}
    # this policy was never scored on a holdout: not measured, never a pass, so the gate does not pass
    assert status["policy_holdout"] == "not_measured" and gate["overall"] != "pass"
    assert call(client, "post", f"{url}/submit", None, eng).status_code == 409  # no longer a draft
    # the drafter cannot sign (separation of duties); another approver can, over a gate that does not
    # pass only with a reason
    sign = {"verdict": "approved", "comment": "ok"}
    refused = call(client, "post", f"{url}/signoff", sign, appr)
    assert refused.status_code == 400 and "override reason" in refused.json()["error"]
    assert call(client, "post", f"{url}/signoff", sign, eng).status_code == 403  # an engineer's token
    sign["override_reason"] = "the holdout was scored by hand: see the ticket"
    signed = call(client, "post", f"{url}/signoff", sign, appr)
    assert signed.status_code == 200, signed.content
    assert signed.json()["status"] == "approved" and signed.json()["archive"]["sequence"] == 1
    assert [e["action"] for e in signed.json()["audit"]] == ["created", "edited", "submitted", "signed"]


@pytest.mark.parametrize(
    "change,field",
    [
        ({"experiment": 999999}, "experiment"),
        ({"candidate_arm": "nope"}, "candidate_arm"),
        ({"slice_policy": 999999}, "slice_policy"),
        ({"supersedes": 999999}, "supersedes"),
    ],
)
def test_a_bad_reference_is_a_400_naming_its_field(
    client, experiment, engineer, api_token_for, change, field
):
    body = {"experiment": experiment.pk, "proposal": "enable", "traffic_class": "interactive"} | change
    response = call(client, "post", "/api/decisions", body, api_token_for(engineer))
    assert response.status_code == 400 and field in response.json()["details"], response.content
    assert not Decision.objects.exists()


def test_another_team_s_experiment_policy_and_decision_are_no_such(
    client, experiment, engineer, api_token_for, draft
):
    from console.accounts.services import team_resolve, user_create

    outsider = user_create(
        username="out", password="x" * 12, role="approver", team=team_resolve("other", create=True)
    )
    headers = api_token_for(outsider)
    body = {"experiment": experiment.pk, "proposal": "enable", "traffic_class": "interactive"}
    response = call(client, "post", "/api/decisions", body, headers)
    assert response.status_code == 400 and response.json()["details"] == {
        "experiment": [f"no experiment with id {experiment.pk}"]
    }
    assert call(client, "post", f"/api/decisions/{draft.pk}/submit", None, headers).status_code == 404
    assert Decision.objects.count() == 1


def test_a_viewer_token_cannot_draft_or_submit(client, experiment, viewer, draft, api_token_for):
    headers = api_token_for(viewer)
    body = {"experiment": experiment.pk, "proposal": "enable", "traffic_class": "interactive"}
    assert call(client, "post", "/api/decisions", body, headers).status_code == 403
    assert call(client, "post", f"/api/decisions/{draft.pk}/submit", None, headers).status_code == 403


def test_a_decision_needing_two_approvers_is_signed_by_two_tokens(
    client, experiment, engineer, approver, second_approver, api_token_for
):
    from console.decisions.selectors import archive_verify

    eng = api_token_for(engineer)
    body = {
        "experiment": experiment.pk,
        "proposal": "enable",
        "traffic_class": "interactive",
        "candidate_arm": "ngram",
        "approvals_required": 2,
    }
    created = call(client, "post", "/api/decisions", body, eng)
    assert created.status_code == 201, created.content
    assert created.json()["approvals_required"] == 2 and created.json()["approvals_count"] == 0
    url = f"/api/decisions/{created.json()['id']}"
    patch = {
        "rationale": "p95 TPOT down on interactive traffic",
        "checklist_answers": ENGINEER_ANSWERS,
        "rollback_owner": "serving on-call",
        "rollback_verification": "p95 TPOT back within 15 min",
    }
    assert call(client, "patch", url, patch, eng).status_code == 200
    assert call(client, "post", f"{url}/submit", None, eng).json()["status"] == "submitted"
    sign = {"verdict": "approved", "comment": "go", "override_reason": "gate read by hand"}
    first = call(client, "post", f"{url}/signoff", sign, api_token_for(approver))
    assert first.status_code == 200, first.content
    one = first.json()
    assert one["status"] == "submitted" and (one["approvals_count"], one["approvals_required"]) == (1, 2)
    assert one["archive"] is None and one["signoff"] is None
    assert [s["signer"] for s in one["signoffs"]] == ["alex-approver"]
    again = call(client, "post", f"{url}/signoff", sign, api_token_for(approver))
    assert again.status_code == 400 and "already signed" in again.json()["error"]
    second = call(
        client, "post", f"{url}/signoff", sign | {"comment": "agreed"}, api_token_for(second_approver)
    )
    assert second.status_code == 200, second.content
    two = second.json()
    assert two["status"] == "approved" and two["approvals_count"] == 2 and two["archive"]["sequence"] == 1
    assert two["signoff"]["signer"] == "sam-approver"  # the signature that signed it
    assert [(s["signer"], s["comment"]) for s in two["signoffs"]] == [
        ("alex-approver", "go"),
        ("sam-approver", "agreed"),
    ]
    assert [e["action"] for e in two["audit"]] == ["created", "edited", "submitted", "approval", "signed"]
    bundle = json.loads(ArchiveRecord.objects.get(decision_id=two["id"]).bundle)
    assert [s["signer_username"] for s in bundle["signoffs"]] == ["alex-approver", "sam-approver"]
    assert archive_verify()["ok"]


@pytest.mark.parametrize("value", [0, 11, "2", True, 2.5])
def test_approvals_required_outside_one_to_ten_is_a_400(
    client, experiment, engineer, draft, api_token_for, value
):
    eng = api_token_for(engineer)
    body = {"experiment": experiment.pk, "proposal": "keep_off", "traffic_class": "interactive"}
    created = call(client, "post", "/api/decisions", body | {"approvals_required": value}, eng)
    assert created.status_code == 400 and "approvals_required" in created.json()["details"], created.content
    patched = call(client, "patch", f"/api/decisions/{draft.pk}", {"approvals_required": value}, eng)
    assert patched.status_code == 400, patched.content
    assert (
        call(client, "patch", f"/api/decisions/{draft.pk}", {"approvals_required": 10}, eng).json()[
            "approvals_required"
        ]
        == 10
    )
    cleared = call(client, "patch", f"/api/decisions/{draft.pk}", {"approvals_required": None}, eng)
    assert cleared.status_code == 200 and cleared.json()["approvals_required"] == 1  # the deployment's
