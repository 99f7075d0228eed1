from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from console.accounts.models import ApiToken, Membership, RawTextAccess, Team
from console.accounts.roles import ROLES
from console.accounts.scopes import DEFAULT_SCOPES, SCOPES
from console.accounts.teams import memberships_forget, role_in, roles_text, team_default, team_for_new
from console.accounts.throttle import minutes_text, throttle_failure_record, throttle_locked_seconds


@transaction.atomic
def user_create(
    *, username: str, password: str, role: str, email: str = "", team: Team | str | None = None
):
    """Create (or update) a user with ``role`` in ``team`` (a Team or a team name, made if missing;
    None: the installation's default team). Their other memberships stay."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    User = get_user_model()
    user, created = User.objects.get_or_create(username=username, defaults={"email": email})
    user.set_password(password)
    user.save()
    membership_set(user=user, team=team_resolve(team, create=True), role=role)
    return user


def team_resolve(team: Team | str | None, *, create: bool = False) -> Team:
    """A Team from a Team, a name or None (the default team). ValidationError for a bad name, or
    for an unknown one unless ``create``."""
    if isinstance(team, Team):
        return team
    if team is None:
        return team_default()
    name = str(team).strip()
    found = Team.objects.filter(name=name).first()
    if found is not None:
        return found
    if not create:
        raise ValidationError({"team": f"no team {name[:64]!r}"})
    made = Team(name=name)
    made.full_clean()
    made.save()
    return made


def membership_set(*, user, team: Team, role: str, raw_text: bool | None = None) -> Membership:
    """Give ``user`` ``role`` in ``team`` (replacing their role there); ``raw_text`` overrides
    whether they read the team's raw text (None: the role decides)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    membership, _ = Membership.objects.update_or_create(
        team=team, user=user, defaults={"role": role, "raw_text": raw_text}
    )
    memberships_forget(user)
    return membership


def membership_remove(*, user, team: Team) -> bool:
    """Take ``user`` out of ``team`` (their tokens for it stop working); False if not a member."""
    deleted, _ = Membership.objects.filter(team=team, user=user).delete()
    memberships_forget(user)
    return bool(deleted)


def user_role(user, *, team_id: int | None = None) -> str | None:
    """The user's role in ``team_id`` (for audit records); without one, the roles for the page
    header ("engineer", or "engineer in a, viewer in b")."""
    if not user.is_authenticated:
        return None
    if team_id is not None:
        return role_in(user, team_id)
    return roles_text(user) or ("admin" if user.is_superuser else None)


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
    *,
    user,
    name: str = "default",
    days: int | None = None,
    scopes: Iterable[str] = DEFAULT_SCOPES,
    team: Team | int | str | None = None,
) -> str:
    """Create a token valid for ``days`` (default ``SPECREVIEW_API_TOKEN_DAYS``) with ``scopes``
    (default read and write: sign only when asked), acting in ``team`` (a Team, id or name the user
    belongs to; None: the user's one team), and return its key; only its digest and first
    characters are stored, so show it once. ValidationError (on ``scopes`` or ``team``) otherwise."""
    checked = api_token_scopes_clean(scopes)
    try:
        chosen = team_for_new(user, None, team=team)
    except ValueError as exc:
        raise ValidationError({"team": f"name the team the token acts in: {exc}"}) from None
    key = secrets.token_urlsafe(32)
    ApiToken.objects.create(
        user=user,
        team=chosen,
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
