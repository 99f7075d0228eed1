"""The decisions API: list, read, edit a draft, sign off with an approver token only."""

from __future__ import annotations

import json

import pytest

from console.decisions.models import Decision


@pytest.fixture(autouse=True)
def comparison(monkeypatch):
    from console.decisions import selectors
    from tests.decisions.factories import summary_make, summary_passing

    monkeypatch.setattr(selectors, "decision_comparison", lambda *, experiment: summary_make(summary_passing()))


def post_json(client, url, body, headers, method="post"):
    return getattr(client, method)(url, data=json.dumps(body), content_type="application/json", **headers)


def test_it_lists_and_reads_decisions(client, signed, draft, viewer, api_token_for):
    headers = api_token_for(viewer)
    listing = client.get("/api/decisions", **headers).json()["decisions"]
    assert {d["id"] for d in listing} == {signed.pk, draft.pk}
    only = client.get("/api/decisions?status=approved", **headers).json()["decisions"]
    assert [d["id"] for d in only] == [signed.pk]
    item = client.get(f"/api/decisions/{signed.pk}", **headers).json()
    assert item["gate"]["overall"] == "pass" and len(item["gate"]["criteria"]) == 5
    assert item["signoff"]["signer"] == "alex-approver" and item["signoff"]["role"] == "approver"
    assert item["archive"]["sequence"] == 1 and len(item["archive"]["bundle_sha256"]) == 64
    assert [e["action"] for e in item["audit"]] == ["created", "edited", "submitted", "signed"]
    assert client.get("/api/decisions/999999", **headers).status_code == 404


def test_it_signs_off_with_an_approver_token(client, submitted, approver, api_token_for):
    response = post_json(
        client,
        f"/api/decisions/{submitted.pk}/signoff",
        {"verdict": "approved", "comment": "lgtm"},
        api_token_for(approver),
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "approved"
    assert Decision.objects.get(pk=submitted.pk).signoff.signer == approver


def test_it_refuses_sign_off_with_an_engineer_or_viewer_token(
    client, submitted, engineer, viewer, api_token_for
):
    for user in (engineer, viewer):
        response = post_json(
            client,
            f"/api/decisions/{submitted.pk}/signoff",
            {"verdict": "approved", "comment": "x"},
            api_token_for(user),
        )
        assert response.status_code == 403
    assert Decision.objects.get(pk=submitted.pk).status == "submitted"


def test_it_refuses_an_approver_token_on_their_own_draft(client, experiment, approver, api_token_for):
    from tests.decisions.conftest import submitted_make

    decision = submitted_make(experiment=experiment, author=approver)
    response = post_json(
        client,
        f"/api/decisions/{decision.pk}/signoff",
        {"verdict": "approved", "comment": "x"},
        api_token_for(approver),
    )
    assert response.status_code == 403 and "drafted" in response.json()["error"]


def test_it_refuses_an_approver_token_that_patched_a_colleagues_draft(
    client, draft, engineer, approver, api_token_for
):
    from console.decisions import services
    from tests.decisions.conftest import draft_complete

    headers = api_token_for(approver)
    response = post_json(client, f"/api/decisions/{draft.pk}", {"rationale": "my words"}, headers, "patch")
    assert response.status_code == 200, response.content
    services.decision_submit(decision=draft_complete(draft, actor=engineer), actor=engineer)
    response = post_json(
        client, f"/api/decisions/{draft.pk}/signoff", {"verdict": "approved", "comment": "x"}, headers
    )
    assert response.status_code == 403
    assert "you edited this decision: someone else must sign" in response.json()["error"]
    assert Decision.objects.get(pk=draft.pk).status == "submitted"


def test_it_answers_409_to_a_second_sign_off(client, submitted, approver, second_approver, api_token_for):
    url = f"/api/decisions/{submitted.pk}/signoff"
    assert (
        post_json(client, url, {"verdict": "approved", "comment": "go"}, api_token_for(approver)).status_code
        == 200
    )
    response = post_json(
        client, url, {"verdict": "rejected", "comment": "no"}, api_token_for(second_approver)
    )
    assert response.status_code == 409
    assert f"already signed by {approver.username}" in response.json()["error"]


def test_it_requires_a_comment_over_the_api(client, submitted, approver, api_token_for):
    response = post_json(
        client, f"/api/decisions/{submitted.pk}/signoff", {"verdict": "approved"}, api_token_for(approver)
    )
    assert response.status_code == 400 and "comment" in response.json()["error"]


def test_it_edits_a_draft_and_refuses_to_edit_a_signed_decision(
    client, draft, signed, engineer, approver, api_token_for
):
    headers = api_token_for(engineer)
    response = post_json(
        client, f"/api/decisions/{draft.pk}", {"rationale": "via the API"}, headers, method="patch"
    )
    assert response.status_code == 200 and response.json()["rationale"] == "via the API"
    response = post_json(
        client, f"/api/decisions/{signed.pk}", {"rationale": "rewritten"}, headers, method="patch"
    )
    assert response.status_code == 409
    response = post_json(
        client,
        f"/api/decisions/{signed.pk}/signoff",
        {"verdict": "rejected", "comment": "again"},
        api_token_for(approver),
    )
    assert response.status_code == 409
    assert Decision.objects.get(pk=signed.pk).rationale != "rewritten"
    assert Decision.objects.get(pk=signed.pk).status == "approved"
    assert client.delete(f"/api/decisions/{signed.pk}", **headers).status_code == 405
    assert (
        post_json(
            client, f"/api/decisions/{draft.pk}", {"gate": {"overall": "pass"}}, headers, method="patch"
        ).status_code
        == 400
    )


def test_it_documents_the_endpoints_in_openapi(client, viewer, api_token_for):
    paths = client.get("/api/openapi.json", **api_token_for(viewer)).json()["paths"]
    assert {"/api/decisions", "/api/decisions/{id}", "/api/decisions/{id}/signoff"} <= set(paths)


def test_it_validates_json_fields_on_patch(client, draft, engineer, api_token_for):
    headers = api_token_for(engineer)
    url = f"/api/decisions/{draft.pk}"
    bad = [
        {"rollback_triggers": [{"metric": "p95 TPOT", "op": "about", "threshold": 1, "window_min": 10}]},
        {"rollback_triggers": "p95 > 1"},
        {"checklist_answers": {"production_traces": {"answer": "maybe"}}},
        {"gate_settings": [1, 2]},
        {"proposal": "ship_it"},
    ]
    for body in bad:
        response = post_json(client, url, body, headers, method="patch")
        assert response.status_code == 400, body
    good = {
        "rollback_triggers": [
            {"metric": "acceptance rate", "op": "<", "threshold": 0.3, "unit": "", "window_min": 10}
        ]
    }
    response = post_json(client, url, good, headers, method="patch")
    assert response.status_code == 200 and response.json()["rollback"]["triggers"][0]["threshold"] == 0.3
