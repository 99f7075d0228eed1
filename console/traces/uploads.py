"""Refuse an oversized upload while it streams in, before Django writes it all to a temporary file."""

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
