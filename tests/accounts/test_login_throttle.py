"""Failed logins per username + address are counted in the cache; too many lock the pair out
for the window with a message saying how long."""

from __future__ import annotations

import pytest

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
LOGIN = "/accounts/login/"


def _try(client, username, password, **extra):
    return client.post(LOGIN, {"username": username, "password": password}, **extra)


def test_it_locks_a_username_and_address_out_after_too_many_failures(client, engineer, settings):
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 5
    settings.SPECREVIEW_LOGIN_LOCKOUT_MINUTES = 15
    for _ in range(4):
        response = _try(client, engineer.username, "wrong-password")
        assert "didn&#x27;t match" in response.content.decode() or "didn't match" in response.content.decode()
    response = _try(client, engineer.username, "wrong-password")
    assert "Too many failed login attempts: try again in 15 minutes." in response.content.decode()
    # even the right password is refused while locked
    response = _try(client, engineer.username, PASSWORD)
    assert response.status_code == 200 and "Too many failed login attempts" in response.content.decode()
    assert "_auth_user_id" not in client.session
    # the same user from another address may still log in
    assert _try(client, engineer.username, PASSWORD, REMOTE_ADDR="10.9.8.7").status_code == 302


def test_it_does_not_lock_out_other_usernames_from_the_same_address(client, engineer, viewer, settings):
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 2
    for _ in range(2):
        _try(client, engineer.username, "wrong-password")
    assert "Too many failed login attempts" in _try(client, engineer.username, PASSWORD).content.decode()
    assert _try(client, viewer.username, PASSWORD).status_code == 302


def test_it_resets_the_count_after_a_successful_login(client, engineer, settings):
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 3
    for _ in range(2):
        _try(client, engineer.username, "wrong-password")
    assert _try(client, engineer.username, PASSWORD).status_code == 302
    client.logout()
    for _ in range(2):
        _try(client, engineer.username, "wrong-password")
    assert _try(client, engineer.username, PASSWORD).status_code == 302  # 4 failures, but 2 since the reset
    client.logout()
    for _ in range(3):
        _try(client, engineer.username, "wrong-password")
    assert "Too many failed login attempts" in _try(client, engineer.username, PASSWORD).content.decode()


def test_it_counts_spellings_django_reads_as_one_username_together(client, engineer, settings):
    # Django's login form applies NFKC (full-width letters are the ASCII ones) and matches exactly;
    # case is part of the name (tests/accounts/test_probe_findings.py).
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 2
    _try(client, "\uff45rin-engineer", "wrong-password")
    _try(client, engineer.username, "wrong-password")
    assert "Too many failed login attempts" in _try(client, engineer.username, PASSWORD).content.decode()
