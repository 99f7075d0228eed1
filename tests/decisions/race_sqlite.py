"""The signing race on SQLite, in a process of its own (pytest's database is PostgreSQL).

Usage: DATABASE_URL=sqlite:////tmp/x.sqlite3 python -m tests.decisions.race_sqlite api|page
Prints the race's results as JSON on the last line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import time


def main(surface: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import setup_test_environment

    assert connection.vendor == "sqlite", connection.vendor
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    setup_test_environment()
    call_command("migrate", verbosity=0, interactive=False)

    from console.accounts.services import user_create
    from tests.decisions.conftest import submitted_make
    from tests.decisions.factories import experiment_make
    from tests.decisions.race import sign_race

    engineer = user_create(username="erin-engineer", password="x" * 10, role="engineer")
    approvers = [user_create(username=f"approver-{i}", password="x" * 10, role="approver") for i in (1, 2)]
    decision = submitted_make(experiment=experiment_make(created_by=engineer), author=engineer)
    path = settings.DATABASES["default"]["NAME"]
    connection.close()
    started = time.monotonic()

    @contextlib.contextmanager
    def hold():
        # The write lock, as any other writer would hold it; nothing to inspect from SQLite that
        # says who waits on it, so the race waits a fixed while for both signers to queue.
        raw = sqlite3.connect(path, isolation_level=None, timeout=30)
        raw.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            raw.execute("COMMIT")
            raw.close()

    def blocked() -> bool:
        return time.monotonic() - started > 2.0

    results = sign_race(
        surface=surface, decision_pk=decision.pk, signers=approvers, hold=hold, blocked=blocked
    )
    from console.decisions.models import SignOff
    from console.decisions.selectors import archive_verify

    out = {
        "results": results,
        "signoffs": list(
            SignOff.objects.filter(decision_id=decision.pk).values_list("signer__username", flat=True)
        ),
        "archive_ok": archive_verify()["ok"],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
