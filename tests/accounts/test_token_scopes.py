"""API tokens carry scopes (read, write, sign): each operation needs one, a token without it gets
a 403 that names it, the role still applies on top, and the OpenAPI document says which scope
every operation needs."""

from __future__ import annotations

import html
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from console.accounts.models import ApiToken
from console.accounts.scopes import SCOPES, required_scope
from console.accounts.services import api_token_create
from console.api import openapi_document
from tests.decisions.conftest import submitted_make
from tests.decisions.factories import experiment_make, summary_make, summary_passing

pytestmark = pytest.mark.django_db
LACKS_WRITE = "this token lacks the 'write' scope"
LACKS_SIGN = "this token lacks the 'sign' scope"


def _bearer(key: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def _post(client, url: str, body: dict, key: str):
    return client.post(url, data=json.dumps(body), content_type="application/json", **_bearer(key))


@pytest.fixture
def submitted(monkeypatch, engineer):
    from console.decisions import selectors

    monkeypatch.setattr(
        selectors, "decision_comparison", lambda *, experiment: summary_make(summary_passing())
    )
    return submitted_make(experiment=experiment_make(created_by=engineer), author=engineer)


def test_it_lets_a_read_token_get_and_refuses_its_post_naming_the_scope(client, engineer):
    key = api_token_create(user=engineer, scopes=["read"])
    assert client.get("/api/experiments", **_bearer(key)).status_code == 200
    response = _post(client, "/api/experiments", {}, key)
    assert response.status_code == 403
    assert LACKS_WRITE in response.json()["error"]


def test_it_lets_a_write_token_past_the_scope_check(client, engineer):
    key = api_token_create(user=engineer, scopes=["read", "write"])
    response = _post(client, "/api/experiments", {}, key)
    assert response.status_code == 400, response.content  # the body's validation answers, not the scope


def test_it_refuses_sign_off_to_a_write_token_and_allows_it_to_a_sign_token(client, approver, submitted):
    url = f"/api/decisions/{submitted.pk}/signoff"
    body = {"verdict": "approved", "comment": "lgtm"}
    refused = _post(client, url, body, api_token_create(user=approver, scopes=["read", "write"]))
    assert refused.status_code == 403 and LACKS_SIGN in refused.json()["error"]
    signed = _post(client, url, body, api_token_create(user=approver, scopes=["read", "sign"]))
    assert signed.status_code == 200, signed.content
    assert signed.json()["status"] == "approved"


def test_it_keeps_the_role_on_top_of_the_scope(client, viewer):
    key = api_token_create(user=viewer, scopes=list(SCOPES))
    response = _post(client, "/api/experiments", {}, key)
    assert response.status_code == 403
    assert "accounts.run_experiment" in response.json()["error"]


def test_it_leaves_session_requests_unaffected(engineer_client):
    response = engineer_client.post("/api/experiments", data="{}", content_type="application/json")
    assert response.status_code == 400, response.content


def test_it_gives_new_tokens_read_and_write_unless_sign_is_asked_for(engineer):
    api_token_create(user=engineer, name="plain")
    api_token_create(user=engineer, name="signer", scopes="sign,read,sign")
    assert ApiToken.objects.get(name="plain").scopes == ["read", "write"]
    assert ApiToken.objects.get(name="signer").scopes == ["read", "sign"]


@pytest.mark.django_db(transaction=True)
def test_it_gives_tokens_made_before_scopes_every_scope(client, engineer):
    executor = MigrationExecutor(connection)
    before = [("accounts", "0005_raw_text_access")]
    executor.migrate(before)
    old_apps = executor.loader.project_state(before).apps
    OldToken = old_apps.get_model("accounts", "ApiToken")
    OldToken.objects.create(
        user_id=engineer.pk, name="old", key_sha256=ApiToken.digest("old-key"), prefix="old-key"
    )
    # before teams a role was a group: the teams migration makes it a membership of the default team
    group = old_apps.get_model("auth", "Group").objects.create(name="engineer")
    old_apps.get_model("auth", "User").objects.get(pk=engineer.pk).groups.add(group)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert ApiToken.objects.get(name="old").scopes == list(SCOPES)
    assert ApiToken.objects.get(name="old").team.name == "default"
    assert client.get("/api/experiments", **_bearer("old-key")).status_code == 200
    assert _post(client, "/api/experiments", {}, "old-key").status_code == 400  # write: past the scope


def test_it_lets_the_page_choose_scopes_and_lists_them(engineer_client, engineer):
    page = engineer_client.post("/accounts/tokens/", {"name": "ci", "scopes": ["read", "sign"]})
    assert page.status_code == 200 and page.context["new_key"]
    assert ApiToken.objects.get(user=engineer, name="ci").scopes == ["read", "sign"]
    listing = engineer_client.get("/accounts/tokens/").content.decode()
    assert "read, sign" in listing
    assert 'value="write"' in listing and 'value="sign"' in listing  # the checkboxes


@pytest.mark.parametrize(
    ("scopes", "message"),
    [(["read", "admin"], "unknown scope 'admin'"), ([], "choose at least one scope")],
)
def test_it_refuses_bad_scopes_on_the_page(engineer_client, engineer, scopes, message):
    page = engineer_client.post("/accounts/tokens/", {"name": "ci", "scopes": scopes})
    assert page.status_code == 400
    assert message in html.unescape(page.content.decode())
    assert not ApiToken.objects.filter(user=engineer).exists()


def test_it_takes_scopes_on_the_command_and_refuses_bad_ones(capsys):
    call_command(
        "create_user", "cli", role="approver", password="longenough1", token=True, scopes="read,sign"
    )
    assert "scopes read, sign" in capsys.readouterr().out
    assert ApiToken.objects.get(user__username="cli").scopes == ["read", "sign"]
    with pytest.raises(CommandError, match="--scopes: unknown scope 'delete'"):
        call_command(
            "create_user", "cli2", role="viewer", password="longenough1", token=True, scopes="read,delete"
        )
    with pytest.raises(CommandError, match="choose at least one scope"):
        call_command("create_user", "cli3", role="viewer", password="longenough1", token=True, scopes=",")
    assert not ApiToken.objects.filter(user__username__in=["cli2", "cli3"]).exists()


def test_it_names_a_scope_for_every_operation_in_the_openapi_document(client, viewer, api_token_for):
    doc = client.get("/api/openapi.json", **api_token_for(viewer)).json()
    assert doc == json.loads(json.dumps(openapi_document()))  # the served one is the annotated one
    seen = {}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op.get("x-required-scope") in SCOPES, f"{method.upper()} {path} names no token scope"
            assert op["x-required-scope"] == required_scope(method=method, capability=op.get("x-permission"))
            seen[f"{method.upper()} {path}"] = op["x-required-scope"]
    assert seen["GET /api/experiments"] == "read"
    assert seen["POST /api/experiments"] == "write"
    assert seen["PATCH /api/decisions/{id}"] == "write"
    assert seen["POST /api/decisions/{id}/signoff"] == "sign"
