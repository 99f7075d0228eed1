"""Appending a signed decision to the archive chain: the one write the chain has.

The hashing and the chain check are pure functions in ``decisions.archive``; this module takes the
lock, reads the chain's last record and stores the next one.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.utils import timezone

from console.decisions import archive, selectors
from console.decisions.models import ArchiveRecord, Decision


def archive_record_append(
    *, decision: Decision, kind: str = ArchiveRecord.Kind.DECISION, bundle: dict[str, Any] | None = None
) -> ArchiveRecord:
    """Freeze ``decision`` into the next archive record (the caller holds the transaction); with
    ``kind="rollout"``, ``bundle`` (a rollout's end state, naming ``decision``) instead."""
    if (kind == ArchiveRecord.Kind.ROLLOUT) != (bundle is not None):
        raise ValueError("a rollout's record, and only it, is given its bundle")
    if connection.vendor == "postgresql":
        # One writer at a time extends the chain (the unique constraints catch any race anyway).
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('specreview.decisions.archive'))")
    last = ArchiveRecord.objects.order_by("-sequence").first()
    sequence = last.sequence + 1 if last else 1
    previous = last.record_sha256 if last else archive.GENESIS
    text = archive.canonical_json(bundle if bundle is not None else selectors.decision_bundle(decision=decision))
    bundle_sha = archive.sha256_text(text)
    archived_at = timezone.now()
    archived_iso = selectors.iso_utc(archived_at)
    record = ArchiveRecord(
        sequence=sequence,
        kind=kind,
        decision=None if bundle is not None else decision,
        rollout_decision=decision if bundle is not None else None,
        bundle=text,
        bundle_sha256=bundle_sha,
        previous_sha256=previous,
        archived_at=archived_at,
        record_sha256=archive.record_hash(
            sequence=sequence,
            decision_id=decision.pk,
            bundle_sha256=bundle_sha,
            previous_sha256=previous,
            archived_at=archived_iso,
        ),
    )
    record.save()
    return record
