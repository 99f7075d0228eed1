"""A look at a file before it is imported: its first requests as the import would build them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from console.traces.arrivals import arrival_spec_parse
from console.traces.columns import ROW_FIELDS
from console.traces.compression import inner_filename
from console.traces.errors import TraceError, TraceImportError
from console.traces.importer import ImportOptions, TraceBuilder
from console.traces.parsers import PARSERS, TIMING
from console.traces.parsers.mapped import FieldMapping
from console.traces.redaction import Redactor
from console.traces.sources import file_content, file_hash_limited, file_unwrapped, format_resolve

PREVIEW_RECORDS = 5


@dataclass(frozen=True)
class TracePreview:
    """The first requests of a file as an import would store them, and the problems met on the way."""

    source_format: str
    label: str
    requests: list[dict[str, Any]]
    errors: list[TraceError]
    more_errors: int = 0


def trace_preview(
    *,
    file: IO[bytes] | Any,
    filename: str = "",
    source_format: str | None = None,
    mapping: FieldMapping | None = None,
    default_task: str | None = None,
    default_max_tokens: int = 256,
    max_bytes: int | None = None,
    limit: int = PREVIEW_RECORDS,
    redactor: Redactor | None = None,
) -> TracePreview:
    """The first ``limit`` requests (id, task, prompt or messages, max_tokens, metadata) as the import
    would build them, through the same detection, decompression, mapping, redaction and validation;
    stores nothing.

    A file that cannot be read at all (size, gzip, format) raises ``TraceImportError``; problems in
    records come back in ``errors`` with the requests before them, so a mapping can be fixed by eye.
    """
    file = file_unwrapped(file)
    filename = filename or Path(str(getattr(file, "name", "") or "upload")).name
    max_bytes = max_bytes or settings.SPECREVIEW_TRACE_MAX_BYTES
    file_hash_limited(file, max_bytes=max_bytes, filename=filename)
    file, _ = file_content(file, filename=filename, max_bytes=max_bytes)
    fmt = format_resolve(file, filename=inner_filename(filename), requested=source_format, mapping=mapping)
    if PARSERS[fmt].kind == TIMING:
        raise TraceImportError(
            [TraceError(None, "format", f"{fmt} has timing only: its prompts come from the pairing pool")]
        )
    builder = TraceBuilder(
        file,
        filename=filename,
        options=ImportOptions(
            source_format=fmt,
            arrival=arrival_spec_parse("constant:1"),
            default_max_tokens=default_max_tokens,
            default_task=default_task,
            mapping=mapping,
            error_cap=limit,
            redactor=redactor,
        ),
    )
    shown = ("request_id", "task", "prompt", "messages", "max_tokens", "tools", "response_format", "metadata")
    requests: list[dict[str, Any]] = []
    for row, _ in builder.rows():
        values = dict(zip(ROW_FIELDS, row, strict=True))
        requests.append({key: values[key] for key in shown})
        if len(requests) >= limit:
            break
    errors = builder.errors
    return TracePreview(fmt, PARSERS[fmt].label, requests, list(errors.errors), errors.more)
