"""Each role can do exactly what it may, checked over every URL the console has."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from console.accounts import roles
from console.accounts.middleware import API_PAGES

SKIP_PREFIXES = ("admin/", "accounts/login", "accounts/logout", "healthz", "static/")


def _walk(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p.callback


def _concrete(route: str) -> str:
    route = re.sub(r"<(?:int:)?[a-z_]+>", "1", route)
    route = re.sub(r"<(?:str|slug|path|uuid):[a-z_]+>", "x", route)
    route = route.replace("^", "").replace("$", "")
    return "/" + route


def all_routes():
    return [(r, cb) for r, cb in _walk(get_resolver().url_patterns) if not r.startswith(SKIP_PREFIXES)]


def test_it_has_routes_to_check():
    assert len(all_routes()) >= 2


@pytest.mark.django_db
def test_it_redirects_anonymous_users_to_login_on_every_page(client):
    for route, _ in all_routes():
        url = _concrete(route)
        response = client.get(url)
        if url.startswith("/api/") and url not in API_PAGES:
            assert response.status_code == 401, url
        else:
            assert response.status_code == 302, url
            assert response["Location"].startswith("/accounts/login/"), url


@pytest.mark.django_db
def test_it_refuses_every_mutation_by_a_viewer(viewer_client):
    for route, _ in all_routes():
        url = _concrete(route)
        if url.startswith("/accounts/"):
            continue  # one's own API tokens: every role manages its own (tests/accounts/test_tokens.py)
        for method in ("post", "put", "delete"):
            response = getattr(viewer_client, method)(url)
            assert response.status_code in (403, 405), f"{method.upper()} {url} gave {response.status_code}"


@pytest.mark.django_db
def test_it_refuses_sign_off_to_an_engineer(engineer_client):
    guarded = []
    for route, callback in all_routes():
        needs = {getattr(callback, "required_capability", None)}
        needs |= set(getattr(callback, "required_capabilities", {}).values())
        if roles.SIGN_DECISION in needs:
            guarded.append(route)
            assert engineer_client.post(_concrete(route)).status_code == 403, route
    # Before the decisions app exists there is nothing to sign; the permission itself must still hold.
    from console.accounts.services import user_create

    engineer = user_create(username="e2", password="x" * 10, role="engineer")
    approver = user_create(username="a2", password="x" * 10, role="approver")
    assert not engineer.has_perm(roles.SIGN_DECISION)
    assert approver.has_perm(roles.SIGN_DECISION)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "role,expected",
    [
        ("viewer", set()),
        ("engineer", {roles.UPLOAD_TRACE, roles.RUN_EXPERIMENT, roles.DRAFT_DECISION, roles.READ_RAW_TEXT}),
        (
            "approver",
            {
                roles.UPLOAD_TRACE,
                roles.RUN_EXPERIMENT,
                roles.DRAFT_DECISION,
                roles.SIGN_DECISION,
                roles.READ_RAW_TEXT,
            },
        ),
    ],
)
def test_it_gives_each_role_exactly_its_permissions(role, expected):
    from console.accounts.services import user_create

    user = user_create(username=f"u-{role}", password="x" * 10, role=role)
    assert {p for p in user.get_all_permissions() if p.startswith("accounts.")} == expected


@pytest.mark.django_db
def test_it_logs_in_with_a_password_and_shows_the_role(client, engineer):
    from tests.conftest import PASSWORD

    response = client.post("/accounts/login/", {"username": engineer.username, "password": PASSWORD})
    assert response.status_code == 302
    page = client.get("/")
    assert page.status_code == 200
    assert b"engineer" in page.content


@pytest.mark.django_db
def test_it_authenticates_the_api_with_a_bearer_token(client, engineer, api_token_for):
    assert client.get("/api/openapi.json").status_code == 401
    response = client.get("/api/openapi.json", **api_token_for(engineer))
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")
    assert client.get("/api/openapi.json", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


@pytest.mark.django_db
def test_it_creates_users_from_the_command_line(capsys):
    from django.core.management import call_command

    call_command("create_user", "cli-user", role="approver", password="longenough1", token=True)
    out = capsys.readouterr().out
    assert "role approver" in out and "API token" in out
