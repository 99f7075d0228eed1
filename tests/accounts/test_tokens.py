"""API tokens expire, can be revoked (page and command), record their last use, and answer every
refusal with a 401 that says why; repeated bad tokens from one address get 429."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from console.accounts.models import ApiToken
from console.accounts.services import ApiTokenRejected, api_token_authenticate, api_token_create

pytestmark = pytest.mark.django_db
API = "/api/openapi.json"


def _bearer(key: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def test_it_gives_a_new_token_the_configured_lifetime_and_a_prefix(engineer, settings):
    settings.SPECREVIEW_API_TOKEN_DAYS = 7
    key = api_token_create(user=engineer, name="ci")
    token = ApiToken.objects.get(user=engineer)
    assert token.prefix == key[:8] and key not in (token.key_sha256, token.prefix)
    assert timedelta(days=7) - timedelta(minutes=1) < token.expires_at - timezone.now() <= timedelta(days=7)


def test_it_records_last_use(client, engineer):
    key = api_token_create(user=engineer)
    assert client.get(API, **_bearer(key)).status_code == 200
    assert ApiToken.objects.get(user=engineer).last_used_at is not None


def test_it_refuses_an_expired_token_with_a_message(client, engineer):
    key = api_token_create(user=engineer)
    ApiToken.objects.filter(user=engineer).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = client.get(API, **_bearer(key))
    assert response.status_code == 401
    assert "expired" in response.json()["error"]


def test_it_refuses_a_revoked_token_with_a_message(client, engineer):
    key = api_token_create(user=engineer)
    call_command("revoke_token", prefix=key[:8])
    response = client.get(API, **_bearer(key))
    assert response.status_code == 401
    assert "revoked" in response.json()["error"]


def test_it_authenticates_in_one_function_every_api_layer_calls(engineer):
    key = api_token_create(user=engineer)
    assert api_token_authenticate(raw=key, client_ip="10.0.0.1") == engineer
    with pytest.raises(ApiTokenRejected) as info:
        api_token_authenticate(raw="nope", client_ip="10.0.0.1")
    assert info.value.status == 401 and "invalid" in info.value.message


def test_it_answers_429_after_too_many_bad_tokens_from_one_address(client, engineer, settings):
    settings.SPECREVIEW_LOGIN_MAX_FAILURES = 3
    good = api_token_create(user=engineer)
    for n in range(3):
        assert client.get(API, **_bearer(f"guess-{n}")).status_code == 401
    response = client.get(API, **_bearer("guess-4"))
    assert response.status_code == 429
    assert "try again in 15 minutes" in response.json()["error"]
    # a valid token is never refused; another address is not affected
    assert client.get(API, **_bearer(good)).status_code == 200
    assert client.get(API, REMOTE_ADDR="10.1.2.3", **_bearer("guess-5")).status_code == 401


def test_it_revokes_by_user_only_with_all_when_several_match(engineer):
    api_token_create(user=engineer, name="a")
    api_token_create(user=engineer, name="b")
    with pytest.raises(CommandError, match="2 tokens match"):
        call_command("revoke_token", username=engineer.username)
    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()
    call_command("revoke_token", username=engineer.username, revoke_all=True)
    assert ApiToken.objects.filter(revoked_at__isnull=False).count() == 2


def test_it_refuses_a_revoke_command_that_names_nothing(engineer):
    with pytest.raises(CommandError, match="name the token"):
        call_command("revoke_token")
    with pytest.raises(CommandError, match="no token matches"):
        call_command("revoke_token", token_id=999999)


def test_it_lists_creates_and_revokes_ones_own_tokens_on_the_page(viewer_client, viewer):
    page = viewer_client.post("/accounts/tokens/", {"name": "notebook", "scopes": ["read"]})
    assert page.status_code == 200
    key = page.context["new_key"]
    assert key and key.encode() in page.content
    token = ApiToken.objects.get(user=viewer, name="notebook")
    listing = viewer_client.get("/accounts/tokens/").content.decode()
    assert token.prefix in listing and key not in listing  # the key is shown once only
    assert viewer_client.post(f"/accounts/tokens/{token.pk}/revoke/").status_code == 302
    token.refresh_from_db()
    assert token.status == "revoked" and token.revoked_by == viewer


def test_it_refuses_to_revoke_someone_elses_token_on_the_page(viewer_client, engineer):
    api_token_create(user=engineer)
    token = ApiToken.objects.get(user=engineer)
    assert viewer_client.post(f"/accounts/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_it_returns_a_form_error_for_a_token_without_a_name(viewer_client):
    response = viewer_client.post("/accounts/tokens/", {"name": ""})
    assert response.status_code == 400
    assert "This field is required" in response.content.decode()
    assert not ApiToken.objects.exists()
