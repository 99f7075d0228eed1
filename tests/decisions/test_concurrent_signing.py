"""Two approvers sign the same decision at the same moment: one wins, the other is told who
did (409 on the API, a message on the page), never a 500 and never two sign-offs. On
PostgreSQL in-process, on SQLite in a subprocess of its own. With N of M approvals (PostgreSQL):
never more signatures than needed, none lost, one archive record."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest
from django.db import connection, transaction

from console.decisions.models import ArchiveRecord, Decision, SignOff
from console.decisions.selectors import archive_verify
from tests.conftest import ROOT
from tests.decisions.conftest import submitted_make
from tests.decisions.race import sign_race


def _assert_one_winner(surface: str, results: list[dict], signoffs: list[str]) -> None:
    assert not any(r["status"] >= 500 for r in results), results
    assert len(signoffs) == 1, signoffs
    winner = signoffs[0]
    won = [r for r in results if r["user"] == winner]
    lost = [r for r in results if r["user"] != winner]
    assert len(won) == 1 and len(lost) == 1, results
    if surface == "api":
        assert won[0]["status"] == 200, won
        assert lost[0]["status"] == 409, lost
        assert f"already signed by {winner}" in json.loads(lost[0]["body"])["error"]
    else:
        assert won[0]["status"] == lost[0]["status"] == 302, results
        assert "Signed and archived." in won[0]["body"]
        assert f"already signed by {winner}" in lost[0]["body"]
        assert "your sign-off was not recorded" in lost[0]["body"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("surface", ["api", "page"])
def test_it_lets_one_of_two_simultaneous_signers_win_on_postgres(
    surface, experiment, engineer, approver, second_approver
):
    if connection.vendor != "postgresql":
        pytest.skip("this one needs PostgreSQL; the SQLite race runs in its own process below")
    decision = submitted_make(experiment=experiment, author=engineer)

    @contextlib.contextmanager
    def hold():
        with transaction.atomic():
            Decision.objects.select_for_update().get(pk=decision.pk)
            yield

    def blocked() -> bool:
        # Both signers are inside decision_sign, waiting on the row lock the holder has.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0] >= 2

    results = sign_race(
        surface=surface,
        decision_pk=decision.pk,
        signers=[approver, second_approver],
        hold=hold,
        blocked=blocked,
    )
    signoffs = list(SignOff.objects.filter(decision=decision).values_list("signer__username", flat=True))
    _assert_one_winner(surface, results, signoffs)
    assert archive_verify()["ok"]


@pytest.mark.parametrize("surface", ["api", "page"])
def test_it_lets_one_of_two_simultaneous_signers_win_on_sqlite(surface, tmp_path):
    env = dict(
        os.environ, DATABASE_URL=f"sqlite:///{tmp_path / 'race.sqlite3'}", SPECREVIEW_VAR_DIR=str(tmp_path)
    )
    result = subprocess.run(
        [sys.executable, "-m", "tests.decisions.race_sqlite", surface],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    _assert_one_winner(surface, out["results"], out["signoffs"])
    assert out["archive_ok"]


def _row_held(decision_pk: int):
    @contextlib.contextmanager
    def hold():
        with transaction.atomic():
            Decision.objects.select_for_update().get(pk=decision_pk)
            yield

    return hold


def _waiting(n: int):
    def blocked() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0] >= n

    return blocked


@pytest.fixture
def third_approver(db):
    from console.accounts.services import user_create
    from tests.conftest import PASSWORD

    return user_create(username="kim-approver", password=PASSWORD, role="approver")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("surface", ["api", "page"])
def test_three_approvers_racing_for_two_approvals_make_two_signatures_and_one_record(
    surface, experiment, engineer, approver, second_approver, third_approver
):
    if connection.vendor != "postgresql":
        pytest.skip("this one needs PostgreSQL")
    decision = submitted_make(experiment=experiment, author=engineer, approvals_required=2)
    signers = [approver, second_approver, third_approver]
    results = sign_race(
        surface=surface,
        decision_pk=decision.pk,
        signers=signers,
        hold=_row_held(decision.pk),
        blocked=_waiting(3),
    )
    assert not any(r["status"] >= 500 for r in results), results
    signed = list(
        SignOff.objects.filter(decision=decision).order_by("id").values_list("signer__username", flat=True)
    )
    assert len(signed) == 2, (signed, results)
    assert ArchiveRecord.objects.filter(decision=decision).count() == 1
    assert Decision.objects.get(pk=decision.pk).status == Decision.Status.APPROVED
    late = [r for r in results if r["user"] not in signed]
    assert len(late) == 1, results
    if surface == "api":
        assert sorted(r["status"] for r in results) == [200, 200, 409], results
        assert f"already signed by {signed[0]} and {signed[1]}" in json.loads(late[0]["body"])["error"]
    else:
        assert all(r["status"] == 302 for r in results), results
        assert "your sign-off was not recorded" in late[0]["body"]
    assert archive_verify()["ok"]


@pytest.mark.django_db(transaction=True)
def test_two_approvers_racing_for_two_approvals_both_count_and_sign_once(
    experiment, engineer, approver, second_approver
):
    if connection.vendor != "postgresql":
        pytest.skip("this one needs PostgreSQL")
    decision = submitted_make(experiment=experiment, author=engineer, approvals_required=2)
    results = sign_race(
        surface="api",
        decision_pk=decision.pk,
        signers=[approver, second_approver],
        hold=_row_held(decision.pk),
        blocked=_waiting(2),
    )
    assert [r["status"] for r in results] == [200, 200], results
    assert sorted(json.loads(r["body"])["status"] for r in results) == ["approved", "submitted"]
    assert SignOff.objects.filter(decision=decision).count() == 2
    assert ArchiveRecord.objects.filter(decision=decision).count() == 1
    assert Decision.objects.get(pk=decision.pk).status == Decision.Status.APPROVED
    assert archive_verify()["ok"]
