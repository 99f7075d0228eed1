"""JSON API for traces: POST /api/traces (multipart), GET /api/traces, GET /api/traces/{id}[/requests]."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from console.accounts.roles import UPLOAD_TRACE
from console.api import ApiError, api_endpoint
from console.traces import selectors
from console.traces.errors import TraceError, TraceImportError
from console.traces.models import Trace
from console.traces.parsers import PARSERS
from console.traces.services import trace_import
from console.traces.uploads import install_size_limit, refused_message

UPLOAD_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "name": {"type": "string"},
                    "format": {"type": "string", "enum": list(PARSERS)},
                    "arrival": {
                        "type": "string",
                        "description": "constant:RATE, poisson:RATE, gamma:RATE:CV, borrow:ID",
                    },
                    "pair_with": {
                        "type": "string",
                        "description": "trace id (or shared:PATH) of a prompt pool",
                    },
                    "holdout": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.3},
                    "seed": {"type": "integer", "default": 0},
                    "default_max_tokens": {"type": "integer", "minimum": 1, "default": 256},
                },
            }
        }
    },
}


def _number(request: HttpRequest, key: str, default, cast):
    raw = request.POST.get(key, "")
    if raw == "":
        return default
    try:
        return cast(raw)
    except ValueError:
        raise ApiError(400, f"{key}: {raw!r} is not a valid {cast.__name__}") from None


@api_endpoint(
    path="/api/traces",
    methods={"GET": "List traces", "POST": "Upload a trace file (multipart); 201 new, 200 already stored"},
    capability={"POST": UPLOAD_TRACE},
    request_body=UPLOAD_BODY,
)
def traces_api(request: HttpRequest):
    if request.method == "GET":
        return {"traces": [selectors.trace_as_dict(t) for t in selectors.trace_list()[:500]]}
    install_size_limit(request)
    upload = request.FILES.get("file")
    refused = refused_message(request)
    if refused:
        raise ApiError(
            400, refused, details=TraceImportError([TraceError(None, None, refused, "upload")]).as_dict()
        )
    if upload is None:
        raise ApiError(400, "send the trace as a multipart form field named 'file'")
    try:
        result = trace_import(
            file=upload,
            name=request.POST.get("name", "") or upload.name or "upload",
            uploaded_by=request.user,
            filename=upload.name or "upload",
            source_format=request.POST.get("format") or None,
            arrival=request.POST.get("arrival") or None,
            pair_with=request.POST.get("pair_with") or None,
            holdout_fraction=_number(request, "holdout", 0.3, float),
            seed=_number(request, "seed", 0, int),
            default_max_tokens=_number(request, "default_max_tokens", 256, int),
            allow_paths=False,
        )
    except TraceImportError as exc:
        raise ApiError(400, f"invalid trace: {exc}", details=exc.as_dict()) from None
    body = {"trace": selectors.trace_as_dict(result.trace, detail=True), "created": result.created}
    body["message"] = result.message
    return JsonResponse(body, status=201 if result.created else 200)


def _trace(pk: int) -> Trace:
    try:
        return selectors.trace_get(pk=pk)
    except Trace.DoesNotExist:
        raise ApiError(404, f"no trace {pk}") from None


@api_endpoint(path="/api/traces/{id}", methods={"GET": "One trace: summary, warnings, pairing"})
def trace_api(request: HttpRequest, pk: int):
    return selectors.trace_as_dict(_trace(pk), detail=True)


@api_endpoint(
    path="/api/traces/{id}/requests",
    methods={"GET": "A trace's requests in arrival order (?split=train|holdout&offset=0&limit=500)"},
)
def trace_requests_api(request: HttpRequest, pk: int):
    trace = _trace(pk)
    try:
        offset = max(0, int(request.GET.get("offset", 0)))
        limit = min(5000, max(1, int(request.GET.get("limit", 500))))
    except ValueError:
        raise ApiError(400, "offset and limit must be integers") from None
    split = request.GET.get("split") or None
    if split not in (None, "all", "train", "holdout"):
        raise ApiError(400, "split must be train, holdout or all")
    qs = selectors.trace_requests(trace=trace, split=split)
    rows = [selectors.trace_request_as_dict(r) for r in qs[offset : offset + limit]]
    return {"trace": trace.pk, "offset": offset, "limit": limit, "count": qs.count(), "requests": rows}
