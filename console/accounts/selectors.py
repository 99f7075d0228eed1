from __future__ import annotations

from django.db.models import QuerySet

from console.accounts.models import ApiToken


def api_tokens_of_user(*, user) -> QuerySet[ApiToken]:
    """A user's tokens, newest first (active, expired and revoked alike)."""
    return ApiToken.objects.filter(user=user).select_related("team").order_by("-created_at", "-pk")


def api_tokens_matching(
    *, token_id: int | None = None, prefix: str | None = None, username: str | None = None
):
    """Tokens selected by id, by the start of their key, or by owner (for ``revoke_token``)."""
    qs = ApiToken.objects.select_related("user").order_by("pk")
    if token_id is not None:
        qs = qs.filter(pk=token_id)
    if prefix:
        qs = qs.filter(prefix__startswith=prefix[: ApiToken.PREFIX_LENGTH])
    if username:
        qs = qs.filter(user__username=username)
    return qs
