"""The audit trail a live probe erased (issue 24, finding 4): TRUNCATE went past the append-only
triggers and verify_archive still passed, although separation of duties reads that trail. Now
TRUNCATE is refused, and verify_archive checks the live trail against every archived bundle."""

from __future__ import annotations

import importlib
import json
from types import SimpleNamespace

import pytest
from django.apps import apps as django_apps
from django.db import DatabaseError, connection, transaction

from console.decisions import archive
from console.decisions.models import ArchiveRecord, AuditEvent, SignOff
from console.decisions.services import decision_export_record
from tests.decisions.conftest import signed_make
from tests.decisions.test_archive import run_verify, tamper

APPEND_ONLY = ("decisions_signoff", "decisions_archiverecord", "decisions_auditevent", "decisions_decision")
postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite has no TRUNCATE: its DELETE fires the row triggers"
)


@pytest.fixture
def three_signed(experiment, engineer, approver):
    return [signed_make(experiment=experiment, author=engineer, signer=approver) for _ in range(3)]


def _truncate_refused(sql: str) -> bool:
    """Whether the guard refused ``sql`` (not some other error: the test's pending foreign-key
    checks, which stop a TRUNCATE too, are run first)."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
    except DatabaseError as exc:
        assert "TRUNCATE refused" in str(exc), exc
        return True
    return False


@postgres_only
@pytest.mark.parametrize("table", APPEND_ONLY)
def test_it_refuses_truncate_of_every_append_only_table(signed, table):
    """Finding 4: TRUNCATE decisions_auditevent succeeded past the row triggers."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL specreview.allow_truncate = 'off'")  # as in production
    assert _truncate_refused(f"TRUNCATE {table} CASCADE")
    assert AuditEvent.objects.filter(decision=signed).count() == 4


@postgres_only
def test_it_refuses_truncate_to_a_role_that_is_not_superuser_even_with_the_setting(signed):
    """Finding 4: the test databases' escape (specreview.allow_truncate) is a superuser's only."""
    role = f"probe_truncate_{connection.settings_dict['NAME']}"[:60]
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} NOSUPERUSER")
        cursor.execute(f"GRANT TRUNCATE ON decisions_auditevent TO {role}")
        cursor.execute(f"SET LOCAL ROLE {role}")
        cursor.execute("SET LOCAL specreview.allow_truncate = 'on'")
    assert _truncate_refused("TRUNCATE decisions_auditevent")
    with connection.cursor() as cursor:
        cursor.execute("RESET ROLE")


def test_it_names_the_decision_and_event_missing_from_the_live_trail(three_signed, capsys):
    """Finding 4: deleting an audit event behind every guard left verify_archive passing."""
    victim = three_signed[1]
    event = AuditEvent.objects.filter(decision=victim, action="edited").get()
    tamper(f"DELETE FROM decisions_auditevent WHERE id = {event.pk}")
    code, message = run_verify(capsys)
    assert code == 1, message
    assert f"record #2 (decision {victim.pk})" in message
    assert f"audit event {event.pk} (edited at " in message and "missing from the live trail" in message


def test_it_names_an_event_changed_in_the_live_trail(three_signed, engineer, approver, capsys):
    """Finding 4: an edit rewritten as another user's would change who may sign."""
    victim = three_signed[0]
    event = AuditEvent.objects.filter(decision=victim, action="edited").get()
    tamper(f"UPDATE decisions_auditevent SET actor_id = {approver.pk} WHERE id = {event.pk}")
    code, message = run_verify(capsys)
    assert code == 1 and f"(decision {victim.pk})" in message
    assert f"audit event {event.pk} (edited at " in message and "actor" in message


@postgres_only
def test_it_names_a_truncated_trail(three_signed, capsys):
    """Finding 4: the probe's own step, TRUNCATE (here with the test database's escape on)."""
    first = AuditEvent.objects.filter(decision=three_signed[0]).order_by("at", "id").first()
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # TRUNCATE waits for no pending checks
        cursor.execute("TRUNCATE decisions_auditevent")
    code, message = run_verify(capsys)
    assert code == 1 and f"record #1 (decision {three_signed[0].pk})" in message
    assert f"audit event {first.pk} (created at " in message


def test_it_passes_with_events_written_after_signing(three_signed, viewer, capsys):
    """Finding 4: exports (and a superseding sign-off) add events later; they are not tampering."""
    decision_export_record(decision=three_signed[0], actor=viewer, fmt="pdf")
    assert run_verify(capsys)[0] == 0


def test_it_records_each_events_id_and_actor_in_the_bundle(signed):
    """Finding 4: the bundle names its events by id, so a check can find each one."""
    bundle = json.loads(ArchiveRecord.objects.get(decision=signed).bundle)
    live = list(AuditEvent.objects.filter(decision=signed).order_by("at", "id"))
    assert [(e["id"], e["actor_id"]) for e in bundle["audit"]] == [(e.pk, e.actor_id) for e in live]


def _event(n: int, action: str, **extra) -> dict:
    return {"action": action, "role": "engineer", "at": f"2026-01-0{n}T00:00:00+00:00", "details": {}} | extra


def test_it_checks_a_bundle_archived_before_events_had_ids_by_position():
    """Finding 4: older bundles carry no event ids: their events are matched in order."""
    archived = [_event(1, "created", actor="erin"), _event(2, "submitted", actor="erin")]
    live = [
        _event(1, "created", id=7, actor_id=1),
        _event(2, "submitted", id=9, actor_id=1),
        _event(3, "exported", id=12, actor_id=2),
    ]
    assert archive.audit_trail_problem(archived, live) is None
    problem = archive.audit_trail_problem(archived, live[1:])
    assert problem and "audit event #1 (created at 2026-01-01" in problem
    changed = [live[0], _event(2, "submitted", id=9, actor_id=1, details={"x": 1})]
    problem = archive.audit_trail_problem(archived, changed)
    assert problem and "audit event #2 (submitted at 2026-01-02" in problem and "details" in problem


def test_it_names_a_signer_name_rewritten_behind_the_archive(three_signed, capsys):
    """Findings 4 and 5: the name pages show for the signer is checked against the bundle's."""
    victim = three_signed[2]
    tamper(f"UPDATE decisions_signoff SET signer_username = 'someone-else' WHERE decision_id = {victim.pk}")
    code, message = run_verify(capsys)
    assert code == 1 and f"record #3 (decision {victim.pk})" in message and "signer name" in message


def test_it_fills_the_signer_name_of_older_sign_offs_from_their_bundle(signed, approver, capsys):
    """Finding 5: sign-offs stored before the column take the name their bundle recorded at signing
    (not the user's current one), and the append-only guard is back on afterwards."""
    fill = importlib.import_module("console.decisions.migrations.0003_signoff_signer_username")._fill
    tamper(f"UPDATE decisions_signoff SET signer_username = '' WHERE decision_id = {signed.pk}")
    approver.username = "renamed-since"
    approver.save()
    fill(django_apps, SimpleNamespace(connection=connection))
    assert SignOff.objects.get(decision=signed).signer_username == "alex-approver"
    assert run_verify(capsys)[0] == 0
    with pytest.raises(DatabaseError), transaction.atomic():
        SignOff.objects.filter(decision=signed).update(signer_username="x")
