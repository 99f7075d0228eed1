"""Every page needs a login; the JSON API takes a bearer token instead of a session."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import JsonResponse
from django.utils import timezone

PUBLIC_PREFIXES = ("/accounts/login/", "/static/", "/healthz")


class LoginRequiredEverywhere:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path
        if path.startswith("/api/"):
            user = _token_user(request)
            if user is not None:
                request.user = user
                # A bearer token is not sent automatically by browsers, so CSRF does not apply.
                request._dont_enforce_csrf_checks = True
            elif not request.user.is_authenticated:
                return JsonResponse(
                    {"error": "authentication required: send 'Authorization: Bearer <token>'"}, status=401
                )
        elif not path.startswith(PUBLIC_PREFIXES) and not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        return self.get_response(request)


def _token_user(request):
    from console.accounts.models import ApiToken

    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() not in {"bearer", "token"} or not key.strip():
        return None
    token = ApiToken.objects.select_related("user").filter(key_sha256=ApiToken.digest(key.strip())).first()
    if token is None or not token.user.is_active:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token.user
