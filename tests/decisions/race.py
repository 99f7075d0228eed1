"""Two approvers sign the same submitted decision at the same moment, through the page or the
API, each in its own thread with its own database connection.

``hold`` keeps the database busy (a row lock, or SQLite's write lock) until ``blocked`` says
both signers are waiting on it, so the two requests really overlap inside ``decision_sign``;
then both go at once. Used by the PostgreSQL test in-process and by ``race_sqlite`` in a
subprocess on a SQLite file.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection


def _client(*, surface: str, user: Any):
    """A logged-in client (page) or one with a bearer token (API), made before the race so that
    logging in is not what the signers wait on."""
    from django.test import Client

    from console.accounts.services import api_token_create

    if surface == "api":
        return Client(
            raise_request_exception=False,
            HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=user, scopes=['read', 'write', 'sign'])}",
        )
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def _sign(*, surface: str, decision_pk: int, user: Any, client: Any) -> dict[str, Any]:
    data = {"verdict": "approved", "comment": f"{user.username} says go"}
    try:
        if surface == "api":
            response = client.post(
                f"/api/decisions/{decision_pk}/signoff", data=data, content_type="application/json"
            )
            status = response.status_code
        else:
            response = client.post(f"/decisions/{decision_pk}/sign/", data, follow=True)
            status = response.redirect_chain[0][1] if response.redirect_chain else response.status_code
        return {"user": user.username, "status": status, "body": response.content.decode()}
    except Exception as exc:  # a crash is the result under test: report it, never hang the race
        return {"user": user.username, "status": 500, "body": f"{type(exc).__name__}: {exc}"}
    finally:
        connection.close()


def sign_race(
    *,
    surface: str,
    decision_pk: int,
    signers: list[Any],
    hold: Callable[[], contextlib.AbstractContextManager],
    blocked: Callable[[], bool],
    timeout_s: float = 120.0,
) -> list[dict[str, Any]]:
    """Each signer's result: ``{"user", "status", "body"}`` (status 500 when the request raised;
    for the page, the status of the POST, the body that of the page it redirected to)."""
    clients = [_client(surface=surface, user=u) for u in signers]
    results: list[dict[str, Any]] = [{} for _ in signers]
    held, release = threading.Event(), threading.Event()

    def holder():
        try:
            with hold():
                held.set()
                release.wait(timeout_s)
        finally:
            connection.close()

    def signer(i: int):
        results[i] = _sign(surface=surface, decision_pk=decision_pk, user=signers[i], client=clients[i])

    hold_thread = threading.Thread(target=holder, daemon=True)
    hold_thread.start()
    assert held.wait(timeout_s), "the holder never took the lock"
    threads = [threading.Thread(target=signer, args=(i,), daemon=True) for i in range(len(signers))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    try:
        while not blocked():
            assert time.monotonic() < deadline, "the signers never both waited on the lock"
            assert all(t.is_alive() for t in threads), f"a signer finished while the lock was held: {results}"
            time.sleep(0.05)
    finally:
        release.set()
    for t in [hold_thread, *threads]:
        t.join(timeout_s)
        assert not t.is_alive(), "a thread of the race hung"
    return results
