"""Every page needs a login; the JSON API takes a bearer token instead of a session."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import JsonResponse

from console.accounts.services import ApiTokenRejected, api_token_check
from console.accounts.throttle import client_address

PUBLIC_PREFIXES = ("/accounts/login/", "/static/", "/healthz")
# The API's interactive docs are a page for a person: a session and the login redirect, like any page.
API_PAGES = ("/api/docs/",)


class LoginRequiredEverywhere:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path
        if path.startswith("/api/") and path not in API_PAGES:
            raw = _bearer(request)
            if raw is not None:
                try:
                    token = api_token_check(raw=raw, client_ip=client_address(request))
                except ApiTokenRejected as exc:
                    return JsonResponse({"error": exc.message}, status=exc.status)
                request.user = token.user
                # console.apikit's bearer scheme admits the request on this mark, and checks
                # the operation's scope against the token's.
                request.api_token_user = request.user
                request.api_token_scopes = frozenset(token.scopes)
                # The token acts in its one team only (console.accounts.teams.memberships reads it).
                request.user.api_token_team_id = token.team_id
                # A bearer token is not sent automatically by browsers, so CSRF does not apply.
                request._dont_enforce_csrf_checks = True
            elif not request.user.is_authenticated:
                return JsonResponse(
                    {"error": "authentication required: send 'Authorization: Bearer <token>'"}, status=401
                )
        elif not path.startswith(PUBLIC_PREFIXES) and not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        return self.get_response(request)


def _bearer(request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None when there is none)."""
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() not in {"bearer", "token"}:
        return None
    return key.strip()
