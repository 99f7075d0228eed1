"""What every app's ``api.py`` builds its operations from, and nothing of the apps themselves.

The bounded fields (``Id``, ``text``, ``LONG_TEXT``), the input and output base models, the error
type an operation raises and the error responses it declares, and ``access``: who may call an
operation and what runs before its body is read. ``console.api`` (the ``NinjaAPI`` object, the
exception handlers and the URLs) imports this; the apps import this and never ``console.api``, so
their routers depend on no other app through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from ninja import Schema
from ninja.errors import HttpError
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from console.accounts import teams
from console.accounts.scopes import required_scope

# Postgres keys are bigints; anything above cannot name a row (and would overflow the query).
MAX_ID = 2**63 - 1
# Postgres text and jsonb cannot hold NUL; refusing it in the schema keeps it out of every query.
NO_NUL = r"^[^\x00]*$"

Id = Annotated[int, Field(ge=1, le=MAX_ID)]
# Free text (a rationale, a comment, notes), in characters: longer is a document, not a field.
LONG_TEXT = 20_000


def text(max_length: int | None = None, *, min_length: int | None = None) -> Any:
    """A NUL-free string, optionally bounded (characters); the bound shows in the schema."""
    return Annotated[str, StringConstraints(pattern=NO_NUL, max_length=max_length, min_length=min_length)]


class ApiError(Exception):
    """Raised by an operation for a status with a message (and optional structured details)."""

    def __init__(self, status: int, message: str, *, details: Any = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details


def row_or_404(queryset: Any, pk: int, *, what: str, user: Any) -> Any:
    """The row with primary key ``pk`` of one of ``user``'s teams (the token's team on a token call),
    or a 404 that names what was looked for: another team's row is not found either."""
    row = teams.visible(queryset.all(), user).filter(pk=pk).first()
    if row is None:
        raise ApiError(404, f"no {what} {pk}")
    return row


class ErrorOut(Schema):
    """Every error the API returns."""

    error: str = Field(description="what went wrong, and where")
    details: Any = Field(None, description="field errors or per-line errors, when there are several")


class Open(BaseModel):
    """An output object: the listed fields are guaranteed, more may follow. (A plain pydantic model:
    ninja's ``Schema`` reads only the declared fields, and the extra ones are the point here.)"""

    model_config = ConfigDict(extra="allow")


class Strict(Schema):
    """An input object: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


def errors(*codes: int) -> dict[int, type[ErrorOut]]:
    """The error responses an operation declares (401, 403 and 429 apply to all: a bad or missing
    token, a missing permission or CSRF token, a bad token after too many from one address or
    with one prefix)."""
    return {code: ErrorOut for code in sorted({401, 403, 429, *codes})}


# --- authentication and permissions -------------------------------------------------------------
# LoginRequiredEverywhere resolves the bearer token (one lookup, shared with the schema endpoint)
# and answers 401 to a request with neither a valid token nor a session. The classes below declare
# the two schemes in the document and, per operation, check the permission before the body is read.


def _admit(request: HttpRequest, *, capability: str | None, before_body: Callable | None) -> Any:
    if capability and not request.user.has_perm(capability):
        raise PermissionDenied(f"needs {capability}")
    if before_body is not None:
        before_body(request)
    return request.user


def _token_scope_check(request: HttpRequest, *, capability: str | None) -> None:
    """403 unless the bearer token has the scope this operation needs (console.accounts.scopes);
    the role's permission is checked after it, so a scope never widens what a role may do."""
    needed = required_scope(method=request.method or "GET", capability=capability)
    if needed not in getattr(request, "api_token_scopes", frozenset()):
        raise ApiError(
            403,
            f"this token lacks the '{needed}' scope ({request.method} {request.path} needs it): "
            "create a token with it on the API tokens page",
        )


class BearerToken(HttpBearer):
    """``Authorization: Bearer <token>`` (``console create_user --token`` issues one); the token's
    scopes must include the one the operation needs."""

    def __init__(self, *, capability: str | None = None, before_body: Callable | None = None):
        super().__init__()
        self.capability, self.before_body = capability, before_body

    def __call__(self, request: HttpRequest) -> Any:
        if getattr(request, "api_token_user", None) is None:
            return None
        _token_scope_check(request, capability=self.capability)
        return _admit(request, capability=self.capability, before_body=self.before_body)

    def authenticate(self, request: HttpRequest, token: str) -> Any:  # pragma: no cover - see __call__
        return getattr(request, "api_token_user", None)


class SessionCookie(APIKeyCookie):
    """The console's login session; writes also need the CSRF token (``X-CSRFToken``)."""

    param_name = settings.SESSION_COOKIE_NAME

    def __init__(self, *, capability: str | None = None, before_body: Callable | None = None):
        super().__init__(csrf=True)
        self.capability, self.before_body = capability, before_body

    def __call__(self, request: HttpRequest) -> Any:
        if getattr(request, "api_token_user", None) is not None or not request.user.is_authenticated:
            return None
        user = _admit(request, capability=self.capability, before_body=self.before_body)
        # After _admit: the CSRF check reads request.POST, so a size limit must already be in place.
        if check_csrf(request) is not None:
            raise HttpError(403, "CSRF check failed")
        return user

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:  # pragma: no cover
        return request.user if request.user.is_authenticated else None


def path_object_visible(model: Any, *, capability: str | None = None) -> Callable[[HttpRequest], None]:
    """A ``before_body`` check: 404 unless the path's ``id`` names a ``model`` row of the user's
    teams, then 403 unless the user holds ``capability`` in the row's team; both before the body
    is validated (a malformed body would otherwise answer 400 and tell the object exists)."""

    def check(request: HttpRequest) -> None:
        raw = str((request.resolver_match.kwargs if request.resolver_match else {}).get("id", ""))
        if raw.isdigit() and 0 < int(raw) <= MAX_ID:
            what = str(model._meta.verbose_name)
            row = row_or_404(model._default_manager.all(), int(raw), what=what, user=request.user)
            if capability:
                teams.require(request.user, capability, team_id=teams.team_id_of(row), what=f"do this to a {what}")

    return check


def access(
    *, capability: str | None = None, before_body: Callable | None = None, path_object: Any = None
) -> dict[str, Any]:
    """Keyword arguments for a router decorator: who may call it, and what runs before the body is read.
    ``path_object``: the model the path's ``id`` names, checked visible first (``path_object_visible``).

    The permission is also written into the document (``x-permission``), which is where the role
    tests and ``guarded_urls`` find it; the token scope follows from it and the method
    (:func:`document_scopes`).
    """
    extra = {"x-permission": capability} if capability else {}
    if path_object is not None:
        visible_check, then = path_object_visible(path_object, capability=capability), before_body

        def before_body(request: HttpRequest) -> None:
            visible_check(request)
            if then is not None:
                then(request)

    return {
        "auth": [
            BearerToken(capability=capability, before_body=before_body),
            SessionCookie(capability=capability, before_body=before_body),
        ],
        "openapi_extra": extra,
    }


HTTP_METHODS = frozenset({"get", "head", "options", "post", "put", "patch", "delete", "trace"})


def document_scopes(doc: dict[str, Any]) -> dict[str, Any]:
    """Write into every operation of an OpenAPI document the token scope it needs
    (``x-required-scope``), from the same rule the bearer scheme enforces; returns ``doc``."""
    for ops in doc.get("paths", {}).values():
        for method, op in ops.items():
            if method in HTTP_METHODS:
                op["x-required-scope"] = required_scope(method=method, capability=op.get("x-permission"))
    return doc
