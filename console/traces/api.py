"""JSON API for traces: POST /api/traces (multipart), GET /api/traces, GET /api/traces/{id}[/requests]."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from django.http import HttpRequest
from ninja import File, Form, Path, Query, Router, Status, UploadedFile

from console.accounts import teams
from console.accounts.access import raw_text_allowed
from console.accounts.roles import UPLOAD_TRACE
from console.accounts.services import raw_text_access_record
from console.apikit import ApiError, Id, Open, access, errors, row_or_404, text
from console.traces import selectors
from console.traces.errors import TraceImportError
from console.traces.models import Trace
from console.traces.parsers import PARSERS
from console.traces.parsers.mapped import (
    KEEP_FIELDS_MAX,
    PATH_MAX_CHARS,
    SYSTEM_PROMPT_MAX_CHARS,
    field_mapping_parse,
)
from console.traces.redaction import MAX_PATTERN_CHARS, MAX_PATTERNS
from console.traces.services import trace_import
from console.traces.uploads import upload_size_guard

router = Router(tags=["traces"])

TraceFormat = Enum("TraceFormat", {name: name for name in PARSERS}, type=str)  # type: ignore[misc]
NAME_MAX = Trace._meta.get_field("name").max_length
SEED_MAX = 2**63 - 1


class TraceOut(Open):
    id: int
    name: str
    source_format: str
    size_bytes: int
    sha256: str
    request_count: int
    holdout_fraction: float
    seed: int
    created_at: str
    url: str


class TraceDetailOut(TraceOut):
    warnings: Any
    summary: Any
    metadata: Any


class TraceListOut(Open):
    traces: list[TraceOut]


class TraceUploadOut(Open):
    trace: TraceDetailOut
    created: bool
    message: str


class TraceRequestOut(Open):
    position: int
    id: str
    arrival_s: float
    max_tokens: int
    split: str


class TraceRequestsOut(Open):
    trace: int
    offset: int
    limit: int
    count: int
    requests: list[TraceRequestOut]


def _trace(request: HttpRequest, pk: int) -> Trace:
    return row_or_404(Trace.objects.select_related("uploaded_by", "team"), pk, what="trace", user=request.user)


@router.get("/traces", response={200: TraceListOut, **errors()}, url_name="traces-api", summary="List traces")
def traces_list(request: HttpRequest):
    return {"traces": [selectors.trace_as_dict(t) for t in selectors.trace_list(user=request.user)[:500]]}


@router.post(
    "/traces",
    response={200: TraceUploadOut, 201: TraceUploadOut, **errors(400, 413)},
    url_name="traces-api",
    summary="Upload a trace file (multipart); 201 new, 200 already stored",
    **access(capability=UPLOAD_TRACE, before_body=upload_size_guard),
)
def traces_upload(
    request: HttpRequest,
    file: File[UploadedFile],
    name: text(NAME_MAX) = Form(""),  # type: ignore[valid-type]
    format: TraceFormat | None = Form(None),  # type: ignore[valid-type]
    arrival: text(200) = Form("", description="constant:RATE, poisson:RATE, gamma:RATE:CV, borrow:ID"),  # type: ignore[valid-type]
    pair_with: text(500) = Form("", description="trace id (or shared:PATH) of a prompt pool"),  # type: ignore[valid-type]
    holdout: float = Form(0.3, ge=0, le=1),
    seed: int = Form(0, ge=0, le=SEED_MAX),
    default_max_tokens: int = Form(256, ge=1, le=2**31 - 1),
    task: text(60) = Form("", description="task label for requests that carry none"),  # type: ignore[valid-type]
    prompt_field: text(PATH_MAX_CHARS) = Form(  # type: ignore[valid-type]
        "", description="dotted path to the prompt text or chat messages: selects the field-mapped format"
    ),
    id_field: text(PATH_MAX_CHARS) = Form("", description="dotted path to the request id"),  # type: ignore[valid-type]
    task_field: text(PATH_MAX_CHARS) = Form("", description="dotted path to the task label"),  # type: ignore[valid-type]
    system_prompt: text(SYSTEM_PROMPT_MAX_CHARS) = Form("", description="system message before each prompt"),  # type: ignore[valid-type]
    keep_field: list[text(PATH_MAX_CHARS)] = Form(  # type: ignore[valid-type]
        [], max_length=KEEP_FIELDS_MAX, description="dotted paths kept in metadata; repeat the field"
    ),
    turns: Literal["first", "all"] = Form(
        "first", description="multi-turn prompt sets: first turn, or all as sessions"
    ),
    think_time: text(100) = Form("", description="before later turns: const:SECONDS, exp:MEAN, none"),  # type: ignore[valid-type]
    redact: bool = Form(
        False, description="replace e-mails, phone and card numbers, keys, IPs by placeholders before storing"
    ),
    redact_patterns: text(MAX_PATTERNS * (MAX_PATTERN_CHARS + 40)) = Form(  # type: ignore[valid-type]
        "", description="with redact: your own NAME=REGEX patterns, one a line"
    ),
    team: text(64) = Form(  # type: ignore[valid-type]
        "", description="the owning team's name or id; default: the token's team, or your one team"
    ),
):
    """Needs permission accounts.upload_trace. The size limit (SPECREVIEW_TRACE_MAX_BYTES) is checked
    against Content-Length before the body is read, and again while it streams in: 413. A gzip file of
    any format is read through the compression, the limit applying to the decompressed bytes."""
    try:
        owner = teams.team_for_new(request.user, UPLOAD_TRACE, team=team or None)
    except ValueError as exc:
        raise ApiError(400, f"team: {exc}") from None
    try:
        mapping = field_mapping_parse(
            prompt_field=prompt_field,
            id_field=id_field,
            task_field=task_field,
            system_prompt=system_prompt,
            keep_fields=keep_field,
        )
        result = trace_import(
            file=file,
            name=name or file.name or "upload",
            uploaded_by=request.user,
            filename=file.name or "upload",
            source_format=format.value if format else None,
            arrival=arrival or None,
            pair_with=pair_with or None,
            holdout_fraction=holdout,
            seed=seed,
            default_max_tokens=default_max_tokens,
            allow_paths=False,
            default_task=task or None,
            mapping=mapping,
            turns=turns,
            think_time=think_time or None,
            redact=redact,
            redact_patterns=redact_patterns,
            team=owner,
        )
    except TraceImportError as exc:
        raise ApiError(400, f"invalid trace: {exc}", details=exc.as_dict()) from None
    body = {
        "trace": selectors.trace_as_dict(result.trace, detail=True),
        "created": result.created,
        "message": result.message,
    }
    return Status(201 if result.created else 200, body)


@router.get(
    "/traces/{id}",
    response={200: TraceDetailOut, **errors(400, 404)},
    url_name="trace-api",
    summary="One trace: summary, warnings, pairing",
)
def trace_detail(request: HttpRequest, id: Path[Id]):  # type: ignore[valid-type]
    return selectors.trace_as_dict(_trace(request, id), detail=True)


@router.get(
    "/traces/{id}/requests",
    response={200: TraceRequestsOut, **errors(400, 404)},
    url_name="trace-requests-api",
    summary="A trace's requests in arrival order",
)
def trace_requests(
    request: HttpRequest,
    id: Path[Id],  # type: ignore[valid-type]
    split: Literal["all", "train", "holdout"] | None = Query(None),
    offset: int = Query(0, ge=0, le=2**31 - 1),
    limit: int = Query(500, ge=1, le=5000),
):
    trace = _trace(request, id)
    qs = selectors.trace_requests(trace=trace, split=split)
    raw_text = raw_text_allowed(user=request.user, team_id=trace.team_id)
    rows = [selectors.trace_request_as_dict(r, raw_text=raw_text) for r in qs[offset : offset + limit]]
    if raw_text and rows:
        raw_text_access_record(user=request.user, view="trace requests API", object_ref=f"trace {trace.pk}")
    return {"trace": trace.pk, "offset": offset, "limit": limit, "count": qs.count(), "requests": rows}
