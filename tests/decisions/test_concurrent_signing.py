"""Two approvers sign the same decision at the same moment: one wins, the other is told who
did (409 on the API, a message on the page), never a 500 and never two sign-offs. On
PostgreSQL in-process, on SQLite in a subprocess of its own."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest
from django.db import connection, transaction

from console.decisions.models import Decision, SignOff
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
