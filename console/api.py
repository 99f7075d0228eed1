"""The JSON API, declared once.

django-ninja reads each operation's type hints (pydantic schemas, ``Path``/``Query``/``Form``/``File``
parameters, the ``response`` map) and derives from them both the request validation and
``/api/openapi.json``: what the document says is what the server checks. Routers live in each app's
``api.py`` and are built from ``console.apikit`` (fields, base models, ``access``); ``console.urls``
mounts them on ``api``.

Here is what sits above every router: the ``NinjaAPI`` object, its strict JSON parser, and one
JSON error shape, ``{"error": "<what and where>", "details": ...}``, for every failure, the apps'
own exceptions (an oversized upload, a signed decision) included. No app imports this module.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, URLResolver, path
from django.views.decorators.http import require_safe
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser

from console.apikit import ApiError, access, document_scopes
from console.decisions.models import FrozenDecisionError
from console.errors import Conflict
from console.jsonutil import JSON_MAX_DEPTH, JsonTooDeep, strict_loads
from console.traces.errors import TraceError, TraceImportError
from console.traces.uploads import UploadTooLarge, refused_message


class StrictJSONParser(Parser):
    """Request bodies as RFC 8259 has JSON (``console.jsonutil.strict_loads``), each field nested
    at most ``JSON_MAX_DEPTH`` levels, as a form field is. ninja answers a body it cannot parse
    with a bare 400; the reason (and the field, for one nested too deep) is kept on the request
    for ``_http_error``."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        try:
            # +1: the body object is a level above the fields it carries
            return strict_loads(request.body, max_depth=JSON_MAX_DEPTH + 1)
        except JsonTooDeep as exc:
            field = exc.path[0] if exc.path else "body"
            message = f"nested deeper than {JSON_MAX_DEPTH} levels"
            request.body_refused = f"{field}: {message}"  # type: ignore[attr-defined]
            request.body_refused_details = {field: [message]}  # type: ignore[attr-defined]
            raise
        except ValueError as exc:  # JSONDecodeError included
            request.body_refused = str(exc)[:200]  # type: ignore[attr-defined]
            raise


api = NinjaAPI(
    title="specreview API",
    version="1",
    description="Traces, experiments, comparisons, slice policies and decisions. See docs/api.md.",
    urls_namespace="api",
    openapi_url=None,  # served by openapi_json below, under the console's own URL name
    docs_url=None,  # Swagger UI loads from a CDN; the console works offline. Point any viewer at the JSON.
    auth=access()["auth"],
    parser=StrictJSONParser(),
)


# --- one error shape ----------------------------------------------------------------------------


def error_response(request: HttpRequest, status: int, message: str, details: Any = None) -> HttpResponse:
    body: dict[str, Any] = {"error": message}
    if details is not None:
        body["details"] = details
    return api.create_response(request, body, status=status)


def _field(loc: tuple | list) -> str:
    # ninja prefixes each location with its source ("body", "query", "path", "form", "file") and,
    # for a body, the parameter name; what a client wants is the field path inside its own input.
    parts = [str(p) for p in loc]
    if parts[:1] == ["body"]:
        parts = parts[2:]
    else:
        parts = parts[1:]
    return ".".join(parts) or "body"


@api.exception_handler(NinjaValidationError)
def _invalid(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    refused = refused_message(request)
    if refused:
        # The size limit stopped the multipart parser, so the file never arrived: say why.
        return _too_large(request, UploadTooLarge(refused))
    details: dict[str, list[str]] = {}
    for err in exc.errors:
        details.setdefault(_field(err.get("loc", ())), []).append(str(err.get("msg", "invalid")))
    summary = "; ".join(f"{k}: {' '.join(v)}" for k, v in list(details.items())[:5])
    return error_response(request, 400, f"invalid request: {summary}", details)


@api.exception_handler(DjangoValidationError)
def _invalid_in_service(request: HttpRequest, exc: DjangoValidationError) -> HttpResponse:
    if hasattr(exc, "error_dict"):
        details = {k: [str(m) for e in v for m in e.messages] for k, v in exc.error_dict.items()}
        summary = "; ".join(f"{k}: {' '.join(v)}" for k, v in details.items())
        return error_response(request, 400, f"invalid request: {summary}", details)
    return error_response(request, 400, "; ".join(exc.messages))


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return error_response(request, exc.status, exc.message, exc.details)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(request, 401, "authentication required: send 'Authorization: Bearer <token>'")


@api.exception_handler(PermissionDenied)
def _forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return error_response(request, 403, f"permission denied: {exc}" if str(exc) else "permission denied")


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(request, 404, str(exc) or "not found")


@api.exception_handler(Conflict)
def _conflict(request: HttpRequest, exc: Conflict) -> HttpResponse:
    return error_response(request, 409, str(exc))


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    refused = getattr(request, "body_refused", None)
    message = f"{exc}: {refused}" if refused and exc.status_code == 400 else str(exc)
    details = getattr(request, "body_refused_details", None) if exc.status_code == 400 else None
    return error_response(request, exc.status_code, message, details)


@api.exception_handler(RequestDataTooBig)
def _body_too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    # Django raises it when the body is read (by the parser, or a CSRF check of a form body); left
    # to Django, the client would get its HTML 400 page.
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    message = f"the request body is larger than {limit / 2**20:g} MiB (DATA_UPLOAD_MAX_MEMORY_SIZE)"
    return error_response(request, 413, message)


@api.exception_handler(SuspiciousOperation)
def _malformed(request: HttpRequest, exc: SuspiciousOperation) -> HttpResponse:
    # Too many form fields or files (TooManyFieldsSent, TooManyFilesSent), a malformed multipart body.
    return error_response(request, 400, f"invalid request: {exc}")


@api.exception_handler(DataError)
def _unstorable(request: HttpRequest, exc: DataError) -> HttpResponse:
    # The schemas bound what they can; a value that still does not fit a column is the client's input.
    return error_response(request, 400, f"a value cannot be stored: {str(exc).splitlines()[0]}")


@api.exception_handler(UploadTooLarge)
def _too_large(request: HttpRequest, exc: UploadTooLarge) -> HttpResponse:
    message = str(exc)
    details = TraceImportError([TraceError(None, None, message, "upload")]).as_dict()
    return error_response(request, 413, message, details)


@api.exception_handler(FrozenDecisionError)
def _frozen(request: HttpRequest, exc: FrozenDecisionError) -> HttpResponse:
    return error_response(request, 409, str(exc))


# --- URLs ---------------------------------------------------------------------------------------


def _openapi_path(route: str) -> str:
    return "/api/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


def guarded_urls() -> list[URLPattern | URLResolver]:
    """ninja's URL patterns, each wrapped so that a method the document does not list gets a JSON
    405 (as every other error), a scalar query parameter sent twice a 400, and so that the role tests can read ``required_capabilities`` and
    ``allowed_methods`` off each view, both taken from the document itself."""
    doc = api.get_openapi_schema(path_prefix="/api/")
    patterns, _, _ = api.urls
    out: list[URLPattern | URLResolver] = [path("openapi.json", openapi_json, name="openapi")]
    for pattern in patterns:
        ops = doc["paths"].get(_openapi_path(str(pattern.pattern)))
        if not isinstance(pattern, URLPattern) or ops is None:  # ninja's root placeholder
            continue
        out.append(
            path(
                str(pattern.pattern),
                _method_guard(pattern.callback, ops),
                name=pattern.name or str(pattern.pattern),
            )
        )
    return out


def _is_array(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "array" or any(_is_array(s) for s in schema.get("anyOf", []))


def _method_guard(view: Callable, ops: dict[str, Any]) -> Callable:
    allowed = tuple(m.upper() for m in ops)
    # A scalar query parameter sent twice (?model=a&model=b) would otherwise be read as its last value.
    scalars = {
        m.upper(): [
            p["name"]
            for p in op.get("parameters", [])
            if p["in"] == "query" and not _is_array(p.get("schema", {}))
        ]
        for m, op in ops.items()
    }

    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method not in allowed:
            response = JsonResponse({"error": f"method {request.method} not allowed"}, status=405)
            response["Allow"] = ", ".join(allowed)
            return response
        repeated = [name for name in scalars[request.method] if len(request.GET.getlist(name)) > 1]
        if repeated:
            details = {name: ["given more than once: send one value"] for name in repeated}
            message = f"invalid request: {', '.join(repeated)}: given more than once: send one value"
            return JsonResponse({"error": message, "details": details}, status=400)
        return view(request, *args, **kwargs)

    guarded.csrf_exempt = True  # type: ignore[attr-defined]  # CSRF is the session scheme's job
    guarded.allowed_methods = allowed  # type: ignore[attr-defined]
    guarded.required_capabilities = {  # type: ignore[attr-defined]
        m.upper(): op["x-permission"] for m, op in ops.items() if "x-permission" in op
    }
    return guarded


def openapi_document() -> dict[str, Any]:
    """The document ``/api/openapi.json`` serves (for tests and tools that want it without HTTP),
    with each operation's token scope (``x-required-scope``)."""
    return document_scopes(api.get_openapi_schema(path_prefix="/api/"))


@require_safe
def openapi_json(request: HttpRequest) -> HttpResponse:
    return JsonResponse(openapi_document())
