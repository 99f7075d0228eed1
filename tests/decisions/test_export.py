"""Exports: Markdown, a PDF whose first page renders to a non-blank image, and the bundle."""

from __future__ import annotations

import json

from console.decisions import archive
from console.decisions.models import ArchiveRecord


def test_it_exports_markdown_with_gate_checklist_rollback_signoff_and_hashes(signed, viewer_client):
    response = viewer_client.get(f"/decisions/{signed.pk}/export.md")
    assert response.status_code == 200
    text = response.content.decode()
    record = ArchiveRecord.objects.get(decision=signed)
    for needle in (
        "## Release gate: PASS",
        "Workload-weighted improvement",
        "## Checklist",
        "## Rollback plan",
        "p95 TPOT (interactive) above the control's beyond the A/A noise floor > 4.00 ms over the control,"
        " looked at every 2 min (5 looks before a breach, then pause)",
        "**approved** by alex-approver (approver)",
        record.bundle_sha256,
        signed.experiment.trace.sha256,
    ):
        assert needle in text, needle
    assert signed.events.filter(action="exported", details__format="markdown").count() == 1


def test_it_exports_a_pdf_that_renders(signed, viewer_client):
    import pypdfium2 as pdfium

    response = viewer_client.get(f"/decisions/{signed.pk}/export.pdf")
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF")
    pdf = pdfium.PdfDocument(response.content)
    assert len(pdf) >= 1
    image = pdf[0].render(scale=1).to_pil().convert("L")
    histogram = image.histogram()
    dark = sum(histogram[:128])
    assert dark > 0.005 * image.width * image.height  # text and table rules, not a blank page
    text = pdf[0].get_textpage().get_text_range()
    assert f"Decision #{signed.pk}" in text and "Release gate" in text
    assert signed.events.filter(action="exported", details__format="pdf").exists()


def test_it_serves_the_archived_bundle_byte_for_byte(signed, viewer_client):
    response = viewer_client.get(f"/decisions/{signed.pk}/bundle.json")
    record = ArchiveRecord.objects.get(decision=signed)
    assert response.content.decode() == record.bundle
    assert archive.sha256_text(response.content.decode()) == record.bundle_sha256


def test_it_marks_a_draft_bundle_provisional(draft, viewer_client):
    bundle = json.loads(viewer_client.get(f"/decisions/{draft.pk}/bundle.json").content)
    assert bundle["provisional"] is True and bundle["signoff"] is None


# -- keys a config stored before configs were validated may hold -------------------------------

LEAKED = "sk-live-abcdef1234567890"


def _leaky_baseline(experiment) -> None:
    from console.experiments.models import ServingConfig

    baseline = experiment.arms.get(is_baseline=True)
    ServingConfig.objects.filter(pk=baseline.config_id).update(
        engine_args={"dtype": "float32", "api_key": LEAKED, "hf_token": "hf_abcdefghijkl"}
    )


def _everything_shown(decision, client, api_token_for, viewer) -> dict[str, str]:
    return {
        "page": client.get(f"/decisions/{decision.pk}/").content.decode(),
        "markdown": client.get(f"/decisions/{decision.pk}/export.md").content.decode(),
        "bundle": client.get(f"/decisions/{decision.pk}/bundle.json").content.decode(),
        "api": client.get(f"/api/decisions/{decision.pk}", **api_token_for(viewer)).content.decode(),
    }


def test_it_never_copies_a_stored_key_into_a_new_plan_checklist_or_bundle(
    experiment, engineer, viewer, viewer_client, api_token_for
):
    from tests.decisions.conftest import draft_make

    _leaky_baseline(experiment)
    draft = draft_make(experiment=experiment, author=engineer)
    assert draft.rollback_revert_config["engine_args"]["api_key"] == "[redacted]"
    assert LEAKED not in json.dumps(draft.checklist)
    shown = _everything_shown(draft, viewer_client, api_token_for, viewer)
    for where, text in shown.items():
        assert LEAKED not in text and "hf_abcdefghijkl" not in text, where
    bundle = json.loads(shown["bundle"])
    assert bundle["evidence"]["baseline"]["engine_args"]["api_key"] == "[redacted]"


def test_it_shows_a_key_an_existing_signed_decision_archived_as_redacted(
    experiment, engineer, approver, viewer, viewer_client, api_token_for
):
    from console.decisions import selectors, services
    from console.decisions.models import Decision
    from tests.decisions.conftest import submitted_make

    decision = submitted_make(experiment=experiment, author=engineer)
    # As rows written before configs were validated hold it: in the plan and the checklist.
    leaked_plan = {**decision.rollback_revert_config, "engine_args": {"api_key": LEAKED}}
    checklist = [
        {**item, "detail": f"baseline: hf m args {{'api_key': '{LEAKED}'}}"} for item in decision.checklist
    ]
    Decision.objects.filter(pk=decision.pk).update(rollback_revert_config=leaked_plan, checklist=checklist)
    decision.refresh_from_db()
    signed = services.decision_sign(decision=decision, signer=approver, verdict="approved", comment="go")
    record = ArchiveRecord.objects.get(decision=signed)
    assert LEAKED in record.bundle  # archived as it was: the archive is never rewritten

    shown = _everything_shown(signed, viewer_client, api_token_for, viewer)
    for where, text in shown.items():
        assert LEAKED not in text, where
        assert "[redacted]" in text, where
    bundle = json.loads(shown["bundle"])
    assert bundle["redacted"]["archived_bundle_sha256"] == record.bundle_sha256
    assert selectors.archive_verify()["ok"]  # the chain still checks against the archived text
