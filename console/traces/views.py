"""Trace pages: list, upload (with a progress bar), detail, delete. They parse input and call services."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from console.accounts import teams
from console.accounts.access import (
    act_required,
    capability_required,
    raw_text_allowed,
    raw_text_shown,
)
from console.accounts.roles import UPLOAD_TRACE
from console.accounts.services import raw_text_access_record
from console.listing import listing
from console.traces import selectors
from console.traces.errors import TraceError, TraceImportError
from console.traces.forms import TraceUploadForm
from console.traces.preview import TracePreview, trace_preview
from console.traces.services import TraceInUseError, trace_delete, trace_import, trace_redactor
from console.traces.uploads import refused_message, upload_size_refusal


@require_safe
def trace_list_view(request: HttpRequest) -> HttpResponse:
    traces = listing(
        request,
        selectors.trace_list(user=request.user),
        sorts={
            "name": "name",
            "format": "source_format",
            "requests": "request_count",
            "holdout": "holdout_fraction",
            "uploaded": "created_at",
        },
        default="-uploaded",
    )
    return render(request, "traces/list.html", {"traces": traces})


@csrf_exempt  # the CSRF check runs in _upload, after the size-limit handler is in place
@capability_required(UPLOAD_TRACE)
@require_http_methods(["GET", "POST"])
def trace_upload_view(request: HttpRequest) -> HttpResponse:
    refused = upload_size_refusal(request) if request.method == "POST" else None
    if refused:
        # answered before the body (and so the CSRF token in it) is read: nothing is stored either way
        error = TraceImportError([TraceError(None, None, refused, "upload")])
        return _upload_page(request, TraceUploadForm(user=request.user), error, status=413)
    return _upload(request)


@csrf_protect
def _upload(request: HttpRequest) -> HttpResponse:
    import_error: TraceImportError | None = None
    xhr = request.headers.get("X-Requested-With") == "XMLHttpRequest"
    if request.method == "POST":
        form = TraceUploadForm(request.POST, request.FILES, user=request.user)
        refused = refused_message(request)
        if refused:
            return _upload_page(
                request, form, TraceImportError([TraceError(None, None, refused, "upload")]), status=413
            )
        if form.is_valid() and request.POST.get("preview"):
            return _preview(request, form, xhr=xhr)
        if form.is_valid():
            data = form.cleaned_data
            upload = data["file"]
            try:
                result = trace_import(
                    file=upload,
                    name=data["name"],
                    uploaded_by=request.user,
                    filename=upload.name,
                    source_format=data["source_format"] or None,
                    arrival=data["arrival"] or None,
                    pair_with=data["pair_with"] or None,
                    holdout_fraction=data["holdout_fraction"],
                    seed=data["seed"],
                    default_max_tokens=data["default_max_tokens"],
                    allow_paths=False,
                    default_task=data.get("default_task") or None,
                    mapping=data.get("mapping"),
                    turns=data["turns"] or "first",
                    think_time=data["think_time"] or None,
                    redact=data.get("redact", False),
                    redact_patterns=data.get("redact_patterns", ""),
                    team=data["team"],
                )
            except TraceImportError as exc:
                import_error = exc
            else:
                level = messages.SUCCESS if result.created else messages.INFO
                messages.add_message(request, level, result.message)
                url = f"/traces/{result.trace.pk}/"
                return JsonResponse({"redirect": url}) if xhr else redirect(url)
    else:
        form = TraceUploadForm(user=request.user)
    return _upload_page(request, form, import_error, status=400 if request.method == "POST" else 200)


def _preview(request: HttpRequest, form: TraceUploadForm, *, xhr: bool) -> HttpResponse:
    """The first records as they would be imported, stored nowhere; the form stays as typed."""
    data = form.cleaned_data
    upload = data["file"]
    preview: TracePreview | None = None
    import_error: TraceImportError | None = None
    try:
        preview = trace_preview(
            file=upload,
            filename=upload.name,
            source_format=data["source_format"] or None,
            mapping=data.get("mapping"),
            default_task=data.get("default_task") or None,
            default_max_tokens=data["default_max_tokens"],
            redactor=trace_redactor(
                redact=data.get("redact", False), patterns=data.get("redact_patterns", ""), team=data["team"]
            ),
        )
    except TraceImportError as exc:
        import_error = exc
    if preview is not None:
        raw_text = raw_text_allowed(user=request.user, team_id=data["team"].pk)
        for r in preview.requests:
            r["messages_json"] = json.dumps(r["messages"], ensure_ascii=False) if r["messages"] else ""
            r["metadata_json"] = json.dumps(r["metadata"], ensure_ascii=False)
            for key in ("prompt", "messages_json", "metadata_json"):
                r[key] = raw_text_shown(r.get(key), allowed=raw_text)
        if raw_text and preview.requests:
            raw_text_access_record(user=request.user, view="upload preview", object_ref=f"file {upload.name}")
    status = 400 if import_error else 200
    if xhr:
        context = {"preview": preview, "preview_error": import_error}
        return render(request, "traces/_preview.html", context, status=status)
    return _upload_page(request, form, None, status=status, preview=preview, preview_error=import_error)


def _upload_page(
    request: HttpRequest,
    form: TraceUploadForm,
    import_error: TraceImportError | None,
    *,
    status: int,
    preview: TracePreview | None = None,
    preview_error: TraceImportError | None = None,
) -> HttpResponse:
    context = {
        "form": form,
        "import_error": import_error,
        "max_bytes": _max_bytes(),
        "preview": preview,
        "preview_error": preview_error,
    }
    return render(request, "traces/upload.html", context, status=status)


def _max_bytes() -> int:
    from django.conf import settings

    return settings.SPECREVIEW_TRACE_MAX_BYTES


@require_safe
def trace_detail_view(request: HttpRequest, pk: int) -> HttpResponse:
    trace = selectors.trace_get(user=request.user, pk=pk)
    samples = selectors.trace_sample_requests(trace=trace)
    raw_text = raw_text_allowed(user=request.user, team_id=trace.team_id)
    for r in samples:
        if not raw_text:
            r.prompt, r.messages = raw_text_shown(r.prompt or r.messages, allowed=False), None
        shown = (
            json.dumps(r.metadata, ensure_ascii=False)
            if raw_text
            else raw_text_shown(r.metadata, allowed=False)
        )
        r.metadata_json = shown  # type: ignore[attr-defined]
    if raw_text:
        raw_text_access_record(user=request.user, view="trace page", object_ref=f"trace {trace.pk}")
    context = {
        "trace": trace,
        "summary": selectors.trace_summary(trace=trace),
        "counts": selectors.trace_counts(trace=trace),
        "figures": selectors.trace_figures(trace=trace),
        "samples": samples,
        "paired": selectors.trace_is_paired(trace=trace),
        "content_kind": selectors.trace_content_kind(trace=trace),
        "redaction": selectors.trace_redaction(trace=trace),
        "experiments": list(trace.experiments.order_by("-created_at")[:20]),
        "can_delete": teams.can(request.user, UPLOAD_TRACE, team_id=trace.team_id),
    }
    return render(request, "traces/detail.html", context)


@capability_required(UPLOAD_TRACE)
@require_POST
def trace_delete_view(request: HttpRequest, pk: int) -> HttpResponse:
    trace = selectors.trace_get(user=request.user, pk=pk)
    act_required(
        user=request.user,
        capability=UPLOAD_TRACE,
        team_id=trace.team_id,
        owner_id=trace.uploaded_by_id,
        what=f"delete trace #{pk}",
    )
    try:
        trace_delete(trace=trace)
    except TraceInUseError as exc:
        messages.error(request, str(exc))
        return redirect(f"/traces/{pk}/")
    messages.success(request, f"Deleted trace {pk} ({trace.name}).")
    return redirect("/traces/")
