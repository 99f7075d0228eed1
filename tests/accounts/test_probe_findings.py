"""Doors a live probe found open in the login and token throttles (issue 24, findings 1 and 2):
failures counted on the spelling typed instead of the account it names, a reset on a form that
never tried a password, valid tokens refused behind a shared address, and forwarded addresses
trusted from anyone."""

from __future__ import annotations

import pytest
from django.test import RequestFactory

from console.accounts.services import api_token_create
from console.accounts.throttle import client_address
from console.env import SettingsError, envnetworks
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
LOGIN = "/accounts/login/"
API = "/api/openapi.json"
# "erin-engineer" with a full-width e (U+FF45): NFKC, which Django's login form applies, makes it
# the same name; so does a full-width hyphen (U+FF0D).
FULL_WIDTH = "\uff45rin-engineer"
SPELLINGS = (FULL_WIDTH, "erin\uff0dengineer", "erin-engineer ", "\uff45rin\uff0dengineer")


def _login(client, username, password, **extra):
    return client.post(LOGIN, {"username": username, "password": password}, **extra)


def _locked(response) -> bool:
    return "Too many failed login attempts" in response.content.decode()


def test_it_locks_out_every_spelling_that_names_the_account(client, engineer, settings):
    """Finding 1: after five wrong passwords, a full-width spelling of the name must not log in."""
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 5
    for _ in range(5):
        _login(client, engineer.username, "wrong-password")
    response = _login(client, FULL_WIDTH, PASSWORD)
    assert _locked(response) and "_auth_user_id" not in client.session


def test_it_counts_failures_under_different_spellings_together(client, engineer, settings):
    """Finding 1: five wrong passwords, each under another spelling of one name, lock that name."""
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 5
    for spelling in (*SPELLINGS, engineer.username):
        _login(client, spelling, "wrong-password")
    assert _locked(_login(client, engineer.username, PASSWORD))


def test_it_counts_on_the_exact_name_django_matches(client, engineer, settings):
    """Finding 1: Django's ModelBackend matches usernames exactly (case included), so ERIN-ENGINEER
    names another account (or none): its failures do not lock erin-engineer out."""
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 2
    for _ in range(2):
        _login(client, engineer.username.upper(), "wrong-password")
    assert _locked(_login(client, engineer.username.upper(), PASSWORD))
    assert _login(client, engineer.username, PASSWORD).status_code == 302


def test_it_does_not_reset_the_count_on_a_post_without_a_password(client, engineer, settings):
    """Finding 1: a post with an empty password tries nothing, so it must not clear the failures."""
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 3
    for _ in range(2):
        _login(client, engineer.username, "wrong-password")
    assert _login(client, engineer.username, "").status_code == 200
    _login(client, engineer.username, "wrong-password")
    assert _locked(_login(client, engineer.username, PASSWORD))


def _bearer(key: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def test_it_authenticates_a_valid_token_after_bad_ones_from_its_address(client, engineer, settings):
    """Finding 2: five bad tokens from one address refuse the next bad one, never a valid one."""
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 5
    good = api_token_create(user=engineer)
    for n in range(5):
        assert client.get(API, **_bearer(f"guess-{n}-xxxxxxxx")).status_code == 401
    refused = client.get(API, **_bearer("guess-5-xxxxxxxx"))
    assert refused.status_code == 429 and "try again in 15 minutes" in refused.json()["error"]
    assert client.get(API, **_bearer(good)).status_code == 200


def test_it_refuses_bad_tokens_that_share_a_prefix_from_many_addresses(client, engineer, settings):
    """Finding 2: guesses at one token prefix are counted across addresses."""
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 3
    good = api_token_create(user=engineer)
    prefix = good[:8]
    for n in range(3):
        response = client.get(API, REMOTE_ADDR=f"198.51.100.{n}", **_bearer(f"{prefix}guess{n}"))
        assert response.status_code == 401
    assert client.get(API, REMOTE_ADDR="198.51.100.9", **_bearer(f"{prefix}guess9")).status_code == 429
    assert client.get(API, REMOTE_ADDR="198.51.100.9", **_bearer("otherprefix-guess")).status_code == 401
    assert client.get(API, REMOTE_ADDR="198.51.100.9", **_bearer(good)).status_code == 200


def _request(remote: str, forwarded: str | None = None):
    extra = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return RequestFactory().get("/", **extra)


def test_it_reads_the_forwarded_address_only_from_a_trusted_proxy(settings):
    """Finding 2: X-Forwarded-For counts only when the peer is a configured proxy, and then the
    address the proxy saw (the last one it did not add itself), not one the client wrote."""
    settings.SPECREVIEW_TRUSTED_PROXIES = ["10.0.0.0/8", "192.0.2.1"]
    assert client_address(_request("198.51.100.7", "203.0.113.5")) == "198.51.100.7"
    assert client_address(_request("10.1.2.3", "203.0.113.5")) == "203.0.113.5"
    assert client_address(_request("192.0.2.1", "6.6.6.6, 203.0.113.5, 10.9.9.9")) == "203.0.113.5"
    assert client_address(_request("10.1.2.3", "not-an-address")) == "10.1.2.3"
    assert client_address(_request("10.1.2.3")) == "10.1.2.3"
    settings.SPECREVIEW_TRUSTED_PROXIES = []
    assert client_address(_request("10.1.2.3", "203.0.113.5")) == "10.1.2.3"


def test_it_throttles_each_client_behind_a_trusted_proxy_on_its_own(client, engineer, settings):
    """Finding 2: behind the proxy, one client's bad tokens do not refuse another client."""
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 3
    settings.SPECREVIEW_TRUSTED_PROXIES = ["10.0.0.0/8"]
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    for n in range(3):
        client.get(API, HTTP_X_FORWARDED_FOR="203.0.113.5", **proxy, **_bearer(f"bad{n}-yyyyyyyyy"))
    assert (
        client.get(API, HTTP_X_FORWARDED_FOR="203.0.113.5", **proxy, **_bearer("bad9-zzzz")).status_code
        == 429
    )
    assert (
        client.get(API, HTTP_X_FORWARDED_FOR="203.0.113.6", **proxy, **_bearer("bad8-wwww")).status_code
        == 401
    )


def test_it_reads_trusted_proxies_as_addresses_and_networks(monkeypatch):
    """Finding 2: the setting is a list of addresses or CIDRs, none by default, and a typo stops start-up."""
    monkeypatch.setenv("SPECREVIEW_TRUSTED_PROXIES", " 10.0.0.0/8, 192.0.2.1 ,::1,10.1.2.3/16")
    assert envnetworks("SPECREVIEW_TRUSTED_PROXIES") == [
        "10.0.0.0/8",
        "192.0.2.1/32",
        "::1/128",
        "10.1.0.0/16",
    ]
    monkeypatch.delenv("SPECREVIEW_TRUSTED_PROXIES")
    assert envnetworks("SPECREVIEW_TRUSTED_PROXIES") == []
    monkeypatch.setenv("SPECREVIEW_TRUSTED_PROXIES", "10.0.0.0/8,proxy.internal")
    with pytest.raises(SettingsError, match="SPECREVIEW_TRUSTED_PROXIES: 'proxy.internal'"):
        envnetworks("SPECREVIEW_TRUSTED_PROXIES")
