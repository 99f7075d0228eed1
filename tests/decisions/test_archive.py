"""The archive: canonical JSON, the hash chain, the database guard, and verify_archive naming
the first record that was tampered with."""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from console.decisions import archive
from console.decisions.models import ArchiveRecord, Decision, SignOff
from console.decisions.selectors import archive_verify
from tests.decisions.conftest import signed_make


def test_it_writes_canonical_json_independent_of_key_order_and_float_noise():
    a = {"b": 1, "a": [0.1 + 0.2, 1.0, float("nan"), float("inf")], "c": {"y": "é", "x": -0.0}}
    b = {"c": {"x": 0.0, "y": "é"}, "a": [0.3, 1.0, float("nan"), float("inf")], "b": 1}
    assert archive.canonical_json(a) == archive.canonical_json(b)
    assert archive.canonical_json(a) == '{"a":[0.3,1.0,"NaN","Infinity"],"b":1,"c":{"x":0.0,"y":"é"}}'
    assert archive.canonical_json({"n": 1}) != archive.canonical_json({"n": 1.0})


def chain(n):
    records, previous = [], archive.GENESIS
    for i in range(1, n + 1):
        bundle = archive.canonical_json({"decision": {"id": i}, "signoff": {"verdict": "approved"}})
        header = dict(
            sequence=i,
            decision_id=i,
            bundle_sha256=archive.sha256_text(bundle),
            previous_sha256=previous,
            archived_at=f"2026-01-0{i}T00:00:00+00:00",
        )
        rec = header | {"bundle": bundle, "record_sha256": archive.record_hash(**header)}
        records.append(rec)
        previous = rec["record_sha256"]
    return records


def test_it_verifies_an_intact_chain_and_names_the_first_break():
    records = chain(4)
    assert archive.chain_verify(records) == {"ok": True, "checked": 4, "break": None}
    records[2]["bundle"] = records[2]["bundle"].replace("approved", "rejected")
    result = archive.chain_verify(records)
    assert result["break"] == {"sequence": 3, "decision_id": 3, "reason": "bundle does not match its sha256"}
    assert result["checked"] == 2


def test_it_detects_a_record_rewritten_with_a_fresh_hash_by_the_link_after_it():
    records = chain(3)
    records[1]["bundle"] = archive.canonical_json({"decision": {"id": 2}, "signoff": {"verdict": "rejected"}})
    records[1]["bundle_sha256"] = archive.sha256_text(records[1]["bundle"])
    result = archive.chain_verify(records)
    assert result["break"]["sequence"] == 2 and "header" in result["break"]["reason"]
    header = {
        k: records[1][k]
        for k in ("sequence", "decision_id", "bundle_sha256", "previous_sha256", "archived_at")
    }
    records[1]["record_sha256"] = archive.record_hash(**header)
    result = archive.chain_verify(records)
    assert result["break"]["sequence"] == 3 and "previous" in result["break"]["reason"]


@pytest.fixture
def three_signed(experiment, engineer, approver):
    return [
        signed_make(experiment=experiment, author=engineer, signer=approver, title=f"d{i}") for i in range(3)
    ]


def test_it_chains_each_signed_decision_to_the_previous_one(three_signed):
    records = list(ArchiveRecord.objects.order_by("sequence"))
    assert [r.sequence for r in records] == [1, 2, 3]
    assert records[0].previous_sha256 == archive.GENESIS
    assert records[1].previous_sha256 == records[0].record_sha256
    assert records[2].previous_sha256 == records[1].record_sha256
    bundle = json.loads(records[0].bundle)
    assert archive.sha256_text(records[0].bundle) == records[0].bundle_sha256
    ev = bundle["evidence"]
    assert ev["trace"]["sha256"] == three_signed[0].experiment.trace.sha256
    assert {c["content_hash"] for c in ev["configs"]} == set(
        three_signed[0].experiment.arms.values_list("config__content_hash", flat=True)
    )
    assert ev["versions"]["ngram"]["transformers"] == "5.17.0"
    assert ev["hardware"]["ngram"]["memory_bytes"] == 16 * 2**30
    assert bundle["decision"]["gate"]["overall"] == "pass"
    assert any(r["metric"] == "tpot_s" for r in bundle["decision"]["gate"]["facts"]["comparisons"])
    assert bundle["decision"]["gate"]["facts"]["memory"]["capacity_bytes"] == 16 * 2**30
    headline = bundle["decision"]["gate"]["facts"]["headline"]
    assert {(h["arm"], h["load"]) for h in headline} == {
        (a, lo) for a in ("baseline", "ngram") for lo in ("1x", "4x")
    }
    assert next(h for h in headline if h["arm"] == "ngram")["peak_memory_bytes"] == 5 * 2**30
    assert bundle["names"]["signer"] == "alex-approver" and bundle["signoff"]["role"] == "approver"
    result = archive_verify()
    assert (result["ok"], result["checked"], result["break"], result["count"]) == (True, 3, None, 3)
    assert result["head_sha256"] == records[2].record_sha256


def test_it_refuses_updates_and_deletes_in_the_database(signed):
    for sql in (
        f"UPDATE decisions_decision SET rationale = 'x' WHERE id = {signed.pk}",
        f"DELETE FROM decisions_decision WHERE id = {signed.pk}",
        f"UPDATE decisions_archiverecord SET bundle = '{{}}' WHERE decision_id = {signed.pk}",
        f"DELETE FROM decisions_archiverecord WHERE decision_id = {signed.pk}",
        f"UPDATE decisions_signoff SET comment = 'x' WHERE decision_id = {signed.pk}",
        f"DELETE FROM decisions_auditevent WHERE decision_id = {signed.pk}",
    ):
        with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
    with pytest.raises(DatabaseError), transaction.atomic():
        Decision.objects.filter(pk=signed.pk).update(rationale="x")
    assert Decision.objects.get(pk=signed.pk).rationale.startswith("p95 TPOT")


def tamper(sql: str) -> None:
    """Write around every guard, as someone with database access could: the table's
    immutability trigger is disabled (ALTER TABLE ... DISABLE TRIGGER, which the table owner
    may do), the row is changed with raw SQL, and the trigger is enabled again. All inside the
    test's transaction, which is rolled back afterwards."""
    table = re.search(r"(?:UPDATE|FROM)\s+(\w+)", sql).group(1)  # type: ignore[union-attr]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Django's foreign keys are deferred; ALTER TABLE refuses while checks are pending.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER {table}_frozen")
            cursor.execute(sql)
            cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER {table}_frozen")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        else:
            for op in ("update", "delete"):  # DDL is transactional in SQLite: rolled back with the test
                cursor.execute(f"DROP TRIGGER IF EXISTS {table}_frozen_{op}")
            cursor.execute(sql)


def run_verify(capsys):
    """Run the command as manage.py would; a CommandError's returncode is the process's exit
    status (``BaseCommand.run_from_argv``), so 1 here is exit 1 on the command line."""
    try:
        call_command("verify_archive")
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, capsys.readouterr().out


def test_it_names_the_archived_row_that_was_tampered_with(three_signed, capsys):
    assert run_verify(capsys)[0] == 0
    target = ArchiveRecord.objects.get(sequence=2)
    bundle = json.loads(target.bundle)
    bundle["signoff"]["comment"] = "a different comment"
    forged = archive.canonical_json(bundle).replace("'", "''")
    tamper(f"UPDATE decisions_archiverecord SET bundle = '{forged}' WHERE id = {target.pk}")
    code, message = run_verify(capsys)
    assert code == 1
    assert f"record #2 (decision {target.decision_id})" in message
    assert "bundle does not match" in message
    if connection.vendor == "postgresql":  # the guard is back on (SQLite's was dropped for the test)
        with pytest.raises(DatabaseError), transaction.atomic():
            ArchiveRecord.objects.filter(pk=target.pk).update(bundle="{}")


def test_it_names_a_signed_decision_changed_behind_the_archive(three_signed, capsys):
    victim = three_signed[2]
    tamper(f"UPDATE decisions_decision SET rationale = 'we always meant to ship' WHERE id = {victim.pk}")
    code, message = run_verify(capsys)
    assert code == 1
    assert f"record #3 (decision {victim.pk})" in message and "decision row" in message


def test_it_names_a_forged_signoff(three_signed, capsys):
    victim = three_signed[0]
    tamper(f"UPDATE decisions_signoff SET verdict = 'rejected' WHERE decision_id = {victim.pk}")
    code, message = run_verify(capsys)
    assert code == 1 and f"record #1 (decision {victim.pk})" in message and "signoff" in message


def test_it_shows_verified_or_the_break_on_the_archive_page(three_signed, viewer_client):
    page = viewer_client.get("/decisions/archive/")
    assert page.status_code == 200
    assert b"verified: 3 records" in page.content
    victim = three_signed[1]
    tamper(f"UPDATE decisions_decision SET title = 'renamed' WHERE id = {victim.pk}")
    page = viewer_client.get("/decisions/archive/")
    assert b"Chain broken" in page.content and b"record #2" in page.content
    assert SignOff.objects.count() == 3


def test_it_survives_renaming_a_user_and_an_arm(three_signed, engineer, capsys):
    engineer.username = "erin-renamed"
    engineer.save()
    three_signed[0].candidate_arm.label = "ngram-renamed"
    three_signed[0].candidate_arm.save()
    assert run_verify(capsys)[0] == 0


def test_it_notices_a_record_removed_from_the_end(three_signed, capsys):
    last = ArchiveRecord.objects.get(sequence=3)
    tamper(f"DELETE FROM decisions_archiverecord WHERE id = {last.pk}")
    code, message = run_verify(capsys)
    assert code == 1 and f"(decision {last.decision_id})" in message and "no archive record" in message
