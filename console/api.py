"""A small JSON API layer shared by every app: errors as JSON, permission checks, OpenAPI.

Views decorated with ``api_endpoint`` receive the parsed request and return a dict/list
(serialised as JSON) or raise ``ApiError``. Each endpoint registers its OpenAPI
operation, and ``/api/openapi.json`` serves them all.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

_OPERATIONS: dict[str, dict[str, Any]] = {}


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, details: Any = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details


def api_endpoint(
    *,
    path: str,
    methods: dict[str, str],
    capability: dict[str, str] | None = None,
    request_body: dict[str, Any] | None = None,
) -> Callable:
    """Declare an API view.

    ``path`` is the OpenAPI path (``/api/traces/{id}``); ``methods`` maps each allowed HTTP
    method to a one-line summary; ``capability`` maps a method to the permission it needs
    (checked server-side, 403 otherwise).
    """
    capability = capability or {}
    for method, summary in methods.items():
        op: dict[str, Any] = {"summary": summary, "responses": {"200": {"description": "OK"}}}
        if method in capability:
            op["description"] = f"Needs permission {capability[method]}."
        if request_body and method in ("POST", "PUT", "PATCH"):
            op["requestBody"] = request_body
        _OPERATIONS.setdefault(path, {})[method.lower()] = op

    def decorate(view: Callable) -> Callable:
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs):
            if request.method not in methods:
                return JsonResponse({"error": f"method {request.method} not allowed"}, status=405)
            perm = capability.get(request.method or "")
            if perm and not request.user.has_perm(perm):
                return JsonResponse({"error": f"permission denied: needs {perm}"}, status=403)
            if request.method in ("POST", "PUT", "PATCH") and request.user.is_authenticated:
                # Session-authenticated API calls still need CSRF; token ones are exempted by middleware.
                from django.middleware.csrf import CsrfViewMiddleware

                if not getattr(request, "_dont_enforce_csrf_checks", False):
                    reason = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})  # type: ignore[arg-type]
                    if reason is not None:
                        return JsonResponse({"error": "CSRF check failed"}, status=403)
            try:
                result = view(request, *args, **kwargs)
            except Http404 as exc:
                return JsonResponse({"error": str(exc) or "not found"}, status=404)
            except ApiError as exc:
                body: dict[str, Any] = {"error": exc.message}
                if exc.details is not None:
                    body["details"] = exc.details
                return JsonResponse(body, status=exc.status)
            if isinstance(result, JsonResponse) or hasattr(result, "status_code"):
                return result
            return JsonResponse(result, safe=False, json_dumps_params={"allow_nan": False})

        wrapper.required_capabilities = dict(capability)  # type: ignore[attr-defined]
        wrapper.allowed_methods = tuple(methods)  # type: ignore[attr-defined]
        return wrapper

    return decorate


def json_body(request: HttpRequest) -> Any:
    try:
        return json.loads(request.body or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None


def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "specreview API", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": dict(sorted(_OPERATIONS.items())),
    }
