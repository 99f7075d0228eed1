"""The login page (throttled) and the user's own API tokens: list, create (key shown once), revoke."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import HttpRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from console.accounts.forms import ApiTokenCreateForm, ThrottledAuthenticationForm
from console.accounts.models import ApiToken
from console.accounts.selectors import api_tokens_of_user
from console.accounts.services import api_token_create, api_token_revoke
from console.listing import listing


class LoginView(auth_views.LoginView):
    authentication_form = ThrottledAuthenticationForm


# no-store: the response to a POST shows a new key once; no browser or proxy cache may keep it.
@never_cache
@require_http_methods(["GET", "HEAD", "POST"])
def tokens(request: HttpRequest):
    form = ApiTokenCreateForm(request.POST if request.method == "POST" else None, user=request.user)
    new_key = None
    if request.method == "POST" and form.is_valid():
        new_key = api_token_create(
            user=request.user,
            name=form.cleaned_data["name"],
            scopes=form.cleaned_data["scopes"],
            team=form.cleaned_data["team"],
        )
        form = ApiTokenCreateForm(user=request.user)
    status = 400 if request.method == "POST" and form.errors else 200
    return render(
        request,
        "accounts/tokens.html",
        {
            "tokens": listing(
                request,
                api_tokens_of_user(user=request.user),
                sorts={
                    "name": "name",
                    "created": "created_at",
                    "expires": "expires_at",
                    "used": "last_used_at",
                },
                default="-created",
            ),
            "form": form,
            "new_key": new_key,
            "token_days": settings.SPECREVIEW_API_TOKEN_DAYS,
        },
        status=status,
    )


@require_POST
def token_revoke(request: HttpRequest, pk: int):
    # Only one's own tokens: an administrator revokes others' with `manage.py revoke_token`.
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    if api_token_revoke(token=token, by=request.user):
        messages.success(request, f"Token {token.name} ({token.prefix or token.pk}) revoked.")
    else:
        messages.info(request, f"Token {token.name} was already revoked.")
    return redirect("accounts:tokens")
