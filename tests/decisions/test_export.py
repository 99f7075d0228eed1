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
        "p95 TPOT (interactive) > 0.05 s for 10 min",
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
