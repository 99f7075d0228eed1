"""Refuse an oversized upload before its body is read, or while it streams in, never after Django has
written it all to a temporary file.

Every upload path calls :func:`upload_size_refusal` first, before anything touches ``request.POST``,
``request.FILES`` or ``request.body`` (a CSRF check or a session-authenticated API wrapper reads the
body too): it refuses a declared ``Content-Length`` over the limit without reading a byte, and
otherwise puts :class:`TraceSizeLimitUploadHandler` first, which stops a body that streams past the
limit. Answer a refusal with ``413``; :func:`refused_message` says whether the handler stopped one.
"""

from __future__ import annotations

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import HttpRequest

# multipart framing and the other form fields ride along with the file
FORM_OVERHEAD_BYTES = 64 * 1024


class TraceSizeLimitUploadHandler(FileUploadHandler):
    """Stops the upload once the file passes ``SPECREVIEW_TRACE_MAX_BYTES``; the rest is discarded unread.

    The view finds ``request.trace_upload_refused`` (bytes received) and reports the limit.
    """

    def __init__(self, request: HttpRequest | None = None, *, max_bytes: int | None = None):
        super().__init__(request)
        self.max_bytes = max_bytes or settings.SPECREVIEW_TRACE_MAX_BYTES
        self.received = 0

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        if (
            content_length
            and content_length > self.max_bytes + FORM_OVERHEAD_BYTES
            and self.request is not None
        ):
            self.request.trace_upload_refused = content_length  # type: ignore[union-attr]
        return None

    def receive_data_chunk(self, raw_data, start):
        self.received += len(raw_data)
        if self.received > self.max_bytes or getattr(self.request, "trace_upload_refused", None):
            if self.request is not None:
                self.request.trace_upload_refused = max(  # type: ignore[union-attr]
                    self.received, getattr(self.request, "trace_upload_refused", 0) or 0
                )
            raise StopUpload(connection_reset=False)
        return raw_data

    def file_complete(self, file_size):
        return None


def upload_size_refusal(request: HttpRequest) -> str | None:
    """Why the upload is refused before its body is read (``Content-Length`` over the limit), or None.

    None also means the streaming check is installed, so call it before the body is touched.
    """
    limit = settings.SPECREVIEW_TRACE_MAX_BYTES
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit + FORM_OVERHEAD_BYTES:
        return (
            f"the upload is {declared:,} bytes, over the size limit of {limit:,} bytes "
            "(SPECREVIEW_TRACE_MAX_BYTES); nothing was read"
        )
    install_size_limit(request)
    return None


def install_size_limit(request: HttpRequest) -> None:
    """Put the size check first, if the body has not been parsed yet."""
    if not hasattr(request, "_files"):
        request.upload_handlers = [TraceSizeLimitUploadHandler(request), *request.upload_handlers]


def refused_message(request: HttpRequest) -> str | None:
    received = getattr(request, "trace_upload_refused", None)
    if not received:
        return None
    limit = settings.SPECREVIEW_TRACE_MAX_BYTES
    return (
        f"the file is larger than the size limit of {limit:,} bytes (SPECREVIEW_TRACE_MAX_BYTES); "
        f"the upload was stopped after {received:,} bytes"
    )


class UploadTooLarge(Exception):
    """The upload is over ``SPECREVIEW_TRACE_MAX_BYTES``; the message says the limit."""


def upload_size_guard(request: HttpRequest) -> None:
    """``upload_size_refusal`` as an exception, for the JSON API (which maps it to 413)."""
    refusal = upload_size_refusal(request)
    if refusal:
        raise UploadTooLarge(refusal)
