from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from console.accounts.models import ApiToken, RawTextAccess
from console.accounts.roles import ROLE_PERMISSIONS, ROLES
from console.accounts.scopes import DEFAULT_SCOPES, SCOPES
from console.accounts.throttle import minutes_text, throttle_failure_record, throttle_locked_seconds


def roles_ensure() -> None:
    """Create the role groups and give each exactly its permissions (idempotent)."""
    for role, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        wanted = []
        for dotted in perms:
            app_label, codename = dotted.split(".")
            wanted.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        group.permissions.set(wanted)


@transaction.atomic
def user_create(*, username: str, password: str, role: str, email: str = ""):
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    roles_ensure()
    User = get_user_model()
    user, created = User.objects.get_or_create(username=username, defaults={"email": email})
    user.set_password(password)
    user.save()
    user.groups.set([Group.objects.get(name=role)])
    return user


def user_role(user) -> str | None:
    if not user.is_authenticated:
        return None
    names = set(user.groups.values_list("name", flat=True))
    for role in ROLES:  # most powerful first is not needed: a user has one role
        if role in names:
            return role
    return "admin" if user.is_superuser else None


def api_token_scopes_clean(scopes: Iterable[str] | str) -> list[str]:
    """The scopes a token asks for (a list, or one comma-separated string), checked and in the
    order of ``SCOPES`` (duplicates and blanks dropped).

    The one place scopes are validated (the token page, the commands and the service call it):
    an unknown scope is named in the error, and a token must have at least one.
    """
    parts = scopes.split(",") if isinstance(scopes, str) else scopes
    asked = [str(s).strip() for s in parts if str(s).strip()]
    unknown = [s for s in asked if s not in SCOPES]
    if unknown:
        names = ", ".join(repr(s[:40]) for s in unknown[:5])
        raise ValidationError(
            {"scopes": f"unknown scope {names}: choose from {', '.join(SCOPES)}"}, code="unknown"
        )
    if not asked:
        raise ValidationError({"scopes": f"choose at least one scope: {', '.join(SCOPES)}"}, code="empty")
    return [s for s in SCOPES if s in asked]


def api_token_create(
    *, user, name: str = "default", days: int | None = None, scopes: Iterable[str] = DEFAULT_SCOPES
) -> str:
    """Create a token valid for ``days`` (default ``SPECREVIEW_API_TOKEN_DAYS``) with ``scopes``
    (default read and write: sign only when asked) and return its key; only its digest and first
    characters are stored, so show it once. ValidationError (on ``scopes``) for a bad scope list."""
    checked = api_token_scopes_clean(scopes)
    key = secrets.token_urlsafe(32)
    ApiToken.objects.create(
        user=user,
        name=name,
        scopes=checked,
        key_sha256=ApiToken.digest(key),
        prefix=key[: ApiToken.PREFIX_LENGTH],
        expires_at=timezone.now() + timedelta(days=days or settings.SPECREVIEW_API_TOKEN_DAYS),
    )
    return key


class ApiTokenRejected(Exception):
    """Why a bearer token was refused: ``status`` is 401 (bad token) or 429 (too many bad ones)."""

    def __init__(self, message: str, *, status: int = 401):
        super().__init__(message)
        self.message = message
        self.status = status


API_TOKEN_SCOPE = "api-token"
API_TOKEN_PREFIX_SCOPE = "api-token-prefix"


def _token_throttle_keys(*, key: str, client_ip: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Where a bad token is counted: its client address, and its first characters (the prefix a
    token page shows), so that guesses at one token are counted from every address."""
    return (
        (API_TOKEN_SCOPE, (client_ip or "unknown",)),
        (API_TOKEN_PREFIX_SCOPE, (key[: ApiToken.PREFIX_LENGTH],)),
    )


def api_token_authenticate(*, raw: str, client_ip: str = ""):
    """The active user a bearer token belongs to (see :func:`api_token_check`)."""
    return api_token_check(raw=raw, client_ip=client_ip).user


def api_token_check(*, raw: str, client_ip: str = "") -> ApiToken:
    """The valid token (its user loaded) a bearer key names, or :class:`ApiTokenRejected` saying
    why not. Its ``scopes`` say what it may be used for (``console.apikit`` checks them).

    The one token check every API layer calls. A valid token always authenticates, whatever came
    before it from its address (behind a proxy every client shares one). Unknown, expired and
    revoked tokens, and tokens of inactive users, are counted against ``client_ip`` and against
    the token's prefix; once either has ``SPECREVIEW_LOGIN_MAX_FAILURES`` in the window, further
    bad tokens from that address or with that prefix get 429 until it ends. Records
    ``last_used_at`` on success.
    """
    key = raw.strip()
    token = (
        ApiToken.objects.select_related("user").filter(key_sha256=ApiToken.digest(key)).first()
        if key
        else None
    )
    reason = None
    if token is None:
        reason = "invalid API token"
    elif token.revoked_at is not None:
        reason = f"API token {token.prefix or token.pk} was revoked on {token.revoked_at:%Y-%m-%d}"
    elif token.expires_at <= timezone.now():
        reason = (
            f"API token {token.prefix or token.pk} expired on {token.expires_at:%Y-%m-%d}: create a new one"
        )
    elif not token.user.is_active:
        reason = "the API token's user is inactive"
    if reason is None:
        assert token is not None
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return token
    keys = _token_throttle_keys(key=key, client_ip=client_ip)
    locked = max(throttle_locked_seconds(scope=scope, parts=parts) for scope, parts in keys)
    if locked:
        raise ApiTokenRejected(
            f"too many failed token attempts from this address or for this token: try again in "
            f"{minutes_text(locked)}",
            status=429,
        )
    for scope, parts in keys:
        throttle_failure_record(scope=scope, parts=parts)
    raise ApiTokenRejected(reason)


def api_token_revoke(*, token: ApiToken, by) -> bool:
    """Revoke ``token`` (idempotent); returns False when it was already revoked."""
    updated = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_by=by
    )
    return updated == 1


def raw_text_access_record(*, user, view: str, object_ref: str) -> RawTextAccess:
    """Record that ``user`` was shown raw text of ``object_ref`` by ``view`` (a page, export or
    API operation): one append-only row per display or export, never one per request row. Call
    it only when the text was shown, i.e. when ``access.raw_text_allowed`` said yes."""
    return RawTextAccess.objects.create(
        user=user, username=user.get_username(), view=view[:100], object_ref=object_ref[:200]
    )
