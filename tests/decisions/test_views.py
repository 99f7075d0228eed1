"""Pages: drafting, editing, submitting, signing through forms; what each role may do; the
admin refusing signed decisions."""

from __future__ import annotations

import pytest
from django.test import Client

from console.decisions.models import Decision
from tests.decisions.conftest import ENGINEER_ANSWERS


@pytest.fixture(autouse=True)
def comparison(monkeypatch):
    """The analysis app's comparison, stubbed at the one seam the views read it through."""
    from console.decisions import selectors
    from tests.decisions.factories import summary_make, summary_passing

    monkeypatch.setattr(selectors, "decision_comparison", lambda *, experiment: summary_make(summary_passing()))


def test_it_drafts_a_decision_from_the_form(engineer_client, experiment):
    page = engineer_client.get(f"/decisions/new/?experiment={experiment.pk}")
    assert page.status_code == 200
    arm = experiment.arms.get(label="ngram")
    response = engineer_client.post(
        "/decisions/new/",
        {
            "experiment": experiment.pk,
            "proposal": "enable",
            "candidate_arm": arm.pk,
            "traffic_class": "interactive",
            "title": "n-gram on",
            "rationale": "faster",
        },
    )
    decision = Decision.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/decisions/{decision.pk}/"
    assert decision.gate["overall"] == "pass"
    page = engineer_client.get(f"/decisions/{decision.pk}/")
    assert page.status_code == 200
    for text in (b"Release gate", b"Checklist", b"Rollback plan", b"Audit trail", b"Workload-weighted"):
        assert text in page.content


def test_it_refuses_a_viewer_drafting(viewer_client, experiment):
    arm = experiment.arms.get(label="ngram")
    assert viewer_client.get("/decisions/new/").status_code == 403
    response = viewer_client.post(
        "/decisions/new/",
        {
            "experiment": experiment.pk,
            "proposal": "enable",
            "candidate_arm": arm.pk,
            "traffic_class": "interactive",
        },
    )
    assert response.status_code == 403
    assert not Decision.objects.exists()
    assert b"Draft from this experiment" not in viewer_client.get("/decisions/").content


def edit_payload(decision, **overrides):
    from console.decisions.forms import DecisionEditForm

    data = {k: ("" if v is None else v) for k, v in DecisionEditForm.initial_for(decision).items()}
    for key, given in ENGINEER_ANSWERS.items():
        data[f"check_{key}"] = given["answer"]
        data[f"note_{key}"] = given.get("note", "")
    data |= {
        "rationale": "because",
        "rollback_owner": "on-call",
        "rollback_verification": "p95 back to baseline",
    }
    data.update(overrides)
    return data


def test_it_edits_submits_and_signs_through_the_pages(draft, engineer_client, approver_client):
    response = engineer_client.post(f"/decisions/{draft.pk}/edit/", edit_payload(draft))
    assert response.status_code == 302, response.content
    draft.refresh_from_db()
    assert draft.rollback_owner == "on-call"
    assert {i["key"]: i["answer"] for i in draft.checklist}["production_traces"] == "yes"
    assert engineer_client.post(f"/decisions/{draft.pk}/submit/").status_code == 302
    draft.refresh_from_db()
    assert draft.status == "submitted"
    page = approver_client.get(f"/decisions/{draft.pk}/")
    assert b'action="/decisions/%d/sign/"' % draft.pk in page.content
    response = approver_client.post(
        f"/decisions/{draft.pk}/sign/", {"verdict": "approved", "comment": "good evidence"}
    )
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.status == "approved" and draft.archive.sequence == 1
    page = approver_client.get(f"/decisions/{draft.pk}/")
    assert b"alex-approver" in page.content and draft.archive.bundle_sha256.encode() in page.content


def test_it_rejects_malformed_rollback_triggers(draft, engineer_client):
    response = engineer_client.post(
        f"/decisions/{draft.pk}/edit/", edit_payload(draft, rollback_triggers="p95 TPOT | about | 3 | s | 10")
    )
    assert response.status_code == 200 and b"op: one of" in response.content


def test_it_refuses_sign_off_by_an_engineer_over_http(submitted, engineer_client):
    response = engineer_client.post(
        f"/decisions/{submitted.pk}/sign/", {"verdict": "approved", "comment": "me"}
    )
    assert response.status_code == 403
    submitted.refresh_from_db()
    assert submitted.status == "submitted"


def test_it_refuses_an_approver_signing_their_own_draft_over_http(experiment, approver, approver_client):
    from tests.decisions.conftest import submitted_make

    decision = submitted_make(experiment=experiment, author=approver)
    page = approver_client.get(f"/decisions/{decision.pk}/")
    assert (
        b"someone else must sign" in page.content
        and b'action="/decisions/%d/sign/"' % decision.pk not in page.content
    )
    response = approver_client.post(
        f"/decisions/{decision.pk}/sign/", {"verdict": "approved", "comment": "mine"}
    )
    assert response.status_code == 403
    assert b"you drafted, edited and submitted this decision: someone else must sign" in response.content
    decision.refresh_from_db()
    assert decision.status == "submitted"


def test_it_refuses_an_approver_who_edited_a_colleagues_draft_over_http(draft, engineer, approver_client):
    form = approver_client.get(f"/decisions/{draft.pk}/edit/")
    assert b"Saving makes you an editor of this decision: someone else will have to sign it." in form.content
    response = approver_client.post(
        f"/decisions/{draft.pk}/edit/", edit_payload(draft, rationale="my words now")
    )
    assert response.status_code == 302
    from console.decisions import services

    services.decision_submit(decision=draft, actor=engineer)
    page = approver_client.get(f"/decisions/{draft.pk}/")
    assert b"Separation of duties: you edited this decision: someone else must sign" in page.content
    response = approver_client.post(f"/decisions/{draft.pk}/sign/", {"verdict": "approved", "comment": "ok"})
    assert response.status_code == 403 and b"you edited this decision" in response.content
    draft.refresh_from_db()
    assert draft.status == "submitted"


def test_it_tells_the_second_signer_who_signed_first(submitted, approver, second_approver):
    from tests.conftest import _client_for

    first, second = _client_for(approver), _client_for(second_approver)
    assert (
        first.post(f"/decisions/{submitted.pk}/sign/", {"verdict": "approved", "comment": "go"}).status_code
        == 302
    )
    response = second.post(
        f"/decisions/{submitted.pk}/sign/", {"verdict": "rejected", "comment": "no"}, follow=True
    )
    assert response.status_code == 200
    assert f"already signed by {approver.username}".encode() in response.content
    submitted.refresh_from_db()
    assert submitted.status == "approved" and submitted.signoff.signer == approver


def test_it_refuses_form_edits_of_a_signed_decision(signed, engineer_client):
    response = engineer_client.post(
        f"/decisions/{signed.pk}/edit/", edit_payload(signed, rationale="rewritten")
    )
    assert response.status_code == 409
    assert engineer_client.get(f"/decisions/{signed.pk}/edit/").status_code == 302
    assert Decision.objects.get(pk=signed.pk).rationale != "rewritten"


def test_it_shows_an_override_forever_after(experiment, engineer, approver, viewer_client):
    from console.decisions import services
    from tests.decisions.conftest import submitted_make
    from tests.decisions.factories import summary_passing

    summary = summary_passing()
    summary["headline"][1]["peak_memory_bytes"] = 15.5 * 2**30
    decision = submitted_make(experiment=experiment, author=engineer, summary=summary)
    services.decision_sign(
        decision=decision,
        signer=approver,
        verdict="approved",
        comment="ok",
        override_reason="we add a node first",
    )
    page = viewer_client.get(f"/decisions/{decision.pk}/")
    assert b"Approved over a failing gate" in page.content and b"we add a node first" in page.content


def test_it_filters_the_archive(experiment, engineer, approver, viewer_client):
    from tests.decisions.conftest import signed_make

    a = signed_make(experiment=experiment, author=engineer, signer=approver, title="alpha-approved")
    signed_make(
        experiment=experiment, author=engineer, signer=approver, verdict="rejected", title="beta-rejected"
    )
    page = viewer_client.get("/decisions/archive/?status=rejected")
    assert b"beta-rejected" in page.content and b"alpha-approved" not in page.content
    page = viewer_client.get("/decisions/archive/?model=qwen2.5-coder")
    assert b"beta-rejected" in page.content and b"alpha-approved" in page.content
    page = viewer_client.get("/decisions/archive/?model=llama")
    assert b"alpha-approved" not in page.content
    day = a.created_at.date()
    page = viewer_client.get(f"/decisions/archive/?date_from={day}&date_to={day}")
    assert b"alpha-approved" in page.content
    page = viewer_client.get(f"/decisions/archive/?date_to={day.replace(year=day.year - 1)}")
    assert b"alpha-approved" not in page.content


@pytest.fixture
def admin_client(db):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_superuser("root", "root@example.com", "x" * 12)
    client = Client()
    client.force_login(user)
    return client


def test_it_refuses_admin_edits_and_deletes_of_a_signed_decision(signed, admin_client):
    url = f"/admin/decisions/decision/{signed.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200  # view-only
    assert b'name="_save"' not in page.content
    response = admin_client.post(url, {"title": "renamed", "rationale": "rewritten", "proposal": "enable"})
    assert response.status_code == 403
    assert (
        admin_client.post(f"/admin/decisions/decision/{signed.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    response = admin_client.post(
        "/admin/decisions/decision/",
        {"action": "delete_selected", "_selected_action": [signed.pk], "post": "yes"},
    )
    assert Decision.objects.filter(pk=signed.pk).exists()
    fresh = Decision.objects.get(pk=signed.pk)
    assert fresh.title != "renamed" and fresh.rationale != "rewritten"
    for model in ("decision", "signoff", "archiverecord", "auditevent"):
        assert admin_client.get(f"/admin/decisions/{model}/add/").status_code == 403


def test_it_limits_the_proposal_to_known_load_levels(draft, engineer_client):
    response = engineer_client.post(
        f"/decisions/{draft.pk}/edit/", edit_payload(draft, loads_in_scope="1x, 9x")
    )
    assert response.status_code == 200 and b"unknown load level 9x" in response.content
    response = engineer_client.post(f"/decisions/{draft.pk}/edit/", edit_payload(draft, loads_in_scope="1x"))
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.gate_settings["loads_in_scope"] == ["1x"] and draft.gate["settings"]["loads_in_scope"] == [
        "1x"
    ]


def test_it_lists_gate_setting_deviations_on_the_page_and_in_exports(experiment, engineer, viewer_client):
    from console.decisions import services
    from tests.decisions.conftest import draft_make

    decision = draft_make(experiment=experiment, author=engineer)
    page = viewer_client.get(f"/decisions/{decision.pk}/").content.decode()
    assert "No deviation: every criterion uses its default settings." in page
    services.decision_update(
        decision=decision,
        actor=engineer,
        changes={"gate_settings": {"memory_fraction": 0.97, "quality_thresholds": {"*": 0.2}}},
    )
    page = viewer_client.get(f"/decisions/{decision.pk}/").content.decode()
    assert "<code>memory_fraction</code>" in page and "<code>0.97</code>" in page
    assert "<code>quality_thresholds</code>" in page
    markdown = viewer_client.get(f"/decisions/{decision.pk}/export.md").content.decode()
    assert "`memory_fraction`: 0.97 (default 0.9)" in markdown
    bundle = viewer_client.get(f"/decisions/{decision.pk}/bundle.json").json()
    assert {d["key"] for d in bundle["decision"]["gate"]["deviations"]} == {"memory_fraction", "quality_thresholds"}


def test_the_lists_and_the_archive_show_each_proposal_its_gate_and_an_override(
    experiment, engineer, approver, viewer_client
):
    """A decision approved over a failing gate stands out in the archive and the recent list;
    every row says what it proposes (issue 22, point 2)."""
    from console.decisions import services
    from tests.decisions.conftest import draft_make, signed_make, submitted_make
    from tests.decisions.factories import summary_passing

    summary = summary_passing()
    summary["headline"][1]["peak_memory_bytes"] = 15.5 * 2**30  # memory headroom fails
    overridden = submitted_make(experiment=experiment, author=engineer, summary=summary, title="over the gate")
    services.decision_sign(
        decision=overridden, signer=approver, verdict="approved", comment="ok", override_reason="a node first"
    )
    signed_make(experiment=experiment, author=engineer, signer=approver, title="clean pass")
    draft_make(experiment=experiment, author=engineer, proposal="keep_off", title="stay off")
    archive = viewer_client.get("/decisions/archive/").content.decode()
    rows = {title: row for row in archive.split("<tr>")[1:] for title in ("over the gate", "clean pass") if title in row}
    assert "Enable everywhere: ngram" in rows["over the gate"] and "approved over the gate" in rows["over the gate"]
    assert 'title="a node first"' in rows["over the gate"] and 'badge fail">fail<' in rows["over the gate"]
    assert "approved over the gate" not in rows["clean pass"] and 'badge pass">pass<' in rows["clean pass"]
    listing = viewer_client.get("/decisions/").content.decode()
    open_rows = [row for row in listing.split("<tr>") if "stay off" in row]
    assert open_rows and "Keep off" in open_rows[0]
    recent = listing[listing.index("Recently signed") :].split("<li>")
    assert "over a failing gate" in next(li for li in recent if "over the gate" in li)
    assert "over a failing gate" not in next(li for li in recent if "clean pass" in li)


def test_the_decision_page_leads_with_the_proposal_the_gate_and_who_signed(experiment, engineer, approver, viewer_client):
    from console.decisions import services
    from tests.decisions.conftest import submitted_make
    from tests.decisions.factories import summary_passing

    summary = summary_passing()
    summary["headline"][1]["peak_memory_bytes"] = 15.5 * 2**30
    decision = submitted_make(experiment=experiment, author=engineer, summary=summary)
    html = viewer_client.get(f"/decisions/{decision.pk}/").content.decode()
    lead = html[html.index('id="decision-lead"') : html.index("</section>", html.index('id="decision-lead"'))]
    assert html.index('id="decision-lead"') < html.index('id="gate"')
    assert "<strong>Enable everywhere with the candidate config</strong>: <strong>ngram</strong>" in lead
    assert 'badge fail">fail<' in lead and "awaiting an approver's signature" in lead
    services.decision_sign(decision=decision, signer=approver, verdict="approved", comment="ok", override_reason="node")
    html = viewer_client.get(f"/decisions/{decision.pk}/").content.decode()
    lead = html[html.index('id="decision-lead"') : html.index("</section>", html.index('id="decision-lead"'))]
    assert f"approved by <b>{approver.username}</b>" in lead and "over the gate" in lead
