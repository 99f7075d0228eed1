"""verify_archive prints the head hash and checks it against one recorded elsewhere: a chain
rewritten whole, with fresh and consistent hashes, verifies on its own but no longer ends there."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from console.decisions import archive
from console.decisions.models import ArchiveRecord
from console.decisions.selectors import iso_utc
from tests.decisions.conftest import signed_make
from tests.decisions.test_archive import tamper


@pytest.fixture
def three_signed(experiment, engineer, approver):
    return [
        signed_make(experiment=experiment, author=engineer, signer=approver, title=f"h{i}") for i in range(3)
    ]


def _verify(capsys, **options):
    try:
        call_command("verify_archive", **options)
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, capsys.readouterr().out


def test_it_prints_only_the_head_hash(three_signed, capsys):
    code, out = _verify(capsys, print_head=True)
    assert code == 0
    assert out.strip() == ArchiveRecord.objects.get(sequence=3).record_sha256


def test_it_passes_when_the_archive_still_ends_with_the_recorded_head(three_signed, capsys):
    head = ArchiveRecord.objects.get(sequence=3).record_sha256
    code, out = _verify(capsys, expect_head=head.upper())
    assert code == 0 and head in out


def test_it_fails_on_a_chain_rewritten_with_consistent_hashes(three_signed, capsys):
    last = ArchiveRecord.objects.get(sequence=3)
    recorded_head = last.record_sha256
    # Rewrite the last record as someone with database access could, keeping the chain consistent.
    stamp = iso_utc(timezone.now())
    forged = archive.record_hash(
        sequence=3,
        decision_id=last.decision_id,
        bundle_sha256=last.bundle_sha256,
        previous_sha256=last.previous_sha256,
        archived_at=stamp,
    )
    tamper(
        f"UPDATE decisions_archiverecord SET archived_at = '{stamp}', record_sha256 = '{forged}' WHERE id = {last.pk}"
    )
    assert _verify(capsys)[0] == 0  # on its own the rewritten chain verifies
    code, message = _verify(capsys, expect_head=recorded_head)
    assert code == 1
    assert f"expected {recorded_head}" in message and forged in message
    assert "no record has that hash" in message


def test_it_says_when_records_were_added_after_the_recorded_head(three_signed, capsys):
    second = ArchiveRecord.objects.get(sequence=2).record_sha256
    code, message = _verify(capsys, expect_head=second)
    assert code == 1 and "record #2's hash" in message
