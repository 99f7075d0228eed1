"""Where an import's input comes from: the upload's bytes (size-limited, hashed, gunzipped), its
format, and the other sources an import may name (a prompt pool to pair a timing trace with, a trace
or timing file to borrow arrivals from), each a stored trace, a shared-data file or a path."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from console.traces.arrivals import arrival_spec_parse
from console.traces.compression import gzip_open_checked, inner_filename, is_gzip
from console.traces.errors import ErrorLog, TraceError, TraceImportError
from console.traces.importer import ImportOptions, TraceBuilder
from console.traces.models import Trace
from console.traces.pairing import PoolPrompt, PromptPool
from console.traces.parsers import (
    PARSERS,
    PROMPTS,
    TIMING,
    ParseContext,
    describe_first_item,
    detect_format,
)
from console.traces.parsers.mapped import FieldMapping, MappedParser
from console.traces.tokens import TokenCounter, prompt_tokens

HASH_CHUNK = 1 << 20


# --- the upload's bytes ------------------------------------------------------------------------------


def file_unwrapped(file: Any) -> IO[bytes]:
    """The plain file object: Django's File/UploadedFile wraps it, and the parsers want the plain one."""
    inner = getattr(file, "file", None)
    return inner if inner is not None and hasattr(inner, "read") else file


def file_hash_limited(file: IO[bytes], *, max_bytes: int, filename: str) -> tuple[str, int]:
    """sha256 and size of the file, read in chunks; refused as soon as it passes ``max_bytes``."""
    file.seek(0)
    digest = hashlib.sha256()
    size = 0
    while chunk := file.read(HASH_CHUNK):
        size += len(chunk)
        if size > max_bytes:
            ErrorLog.fail(
                f"the file is larger than the size limit of {max_bytes:,} bytes "
                f"(SPECREVIEW_TRACE_MAX_BYTES); refused after reading {size:,} bytes",
                file=filename,
            )
        digest.update(chunk)
    if size == 0 or _is_blank(file, size):
        ErrorLog.fail("the file is empty", file=filename)
    file.seek(0)
    return digest.hexdigest(), size


def _is_blank(file: IO[bytes], size: int) -> bool:
    if size > 4096:
        return False
    file.seek(0)
    blank = not file.read().strip(b"\xef\xbb\xbf \t\r\n")
    file.seek(0)
    return blank


def file_content(file: IO[bytes], *, filename: str, max_bytes: int) -> tuple[IO[bytes], int | None]:
    """The bytes to parse: the file itself, or a checked ``GzipFile`` over it (and its decompressed size)."""
    if is_gzip(file):
        return gzip_open_checked(file, filename=filename, max_bytes=max_bytes)
    return file, None


# --- the sources an import names --------------------------------------------------------------


def _shared_path(name: str) -> Path:
    root = Path(settings.SPECREVIEW_SHARED_DATA).resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise TraceImportError([TraceError(None, "pair_with", f"no shared data file {name!r}")])
    return path


def source_resolve(source: str, *, allow_paths: bool = True, team_id: int | None = None) -> Trace | Path:
    """A trace (``12``, ``trace:12``), a shared-data file (``shared:prompts/...``) or a file path.

    Pages and the API pass ``allow_paths=False``: a server path must never be read on a user's behalf.
    ``team_id``: only that team's traces (the importing team's: another team's trace "does not exist").
    """
    text = str(source).strip()
    if text.startswith("trace:"):
        text = text.removeprefix("trace:")
        if not text.isdigit():
            raise TraceImportError([TraceError(None, None, f"{source!r} is not a trace id")])
    if text.isdigit():
        traces = Trace.objects.all() if team_id is None else Trace.objects.filter(team_id=team_id)
        trace = traces.filter(pk=int(text)).first()
        if trace is None:
            raise TraceImportError([TraceError(None, None, f"there is no trace {text}")])
        return trace
    if text.startswith("shared:"):
        return _shared_path(text.removeprefix("shared:"))
    if not allow_paths:
        raise TraceImportError(
            [
                TraceError(
                    None, None, f"{source!r}: give a stored trace id (or a shared: data file), not a path"
                )
            ]
        )
    path = Path(text).expanduser()
    if not path.is_file():
        raise TraceImportError([TraceError(None, None, f"no such file {text!r}")])
    return path


def format_resolve(
    file: IO[bytes], *, filename: str, requested: str | None, mapping: FieldMapping | None = None
) -> str:
    """The parser's name: the mapped one when a prompt field maps the file, else the one asked for,
    else the one detected from the first item; a format that cannot be told raises TraceImportError."""
    if mapping is not None:
        if requested and requested != MappedParser.name:
            raise TraceImportError(
                [
                    TraceError(
                        None,
                        "format",
                        f"a prompt field maps the file itself: give no format ({requested!r})",
                        filename,
                    )
                ]
            )
        return MappedParser.name
    if requested == MappedParser.name:
        raise TraceImportError(
            [
                TraceError(
                    None, "prompt_field", "the mapped format needs a prompt field (--prompt-field)", filename
                )
            ]
        )
    if requested:
        if requested not in PARSERS:
            raise TraceImportError(
                [TraceError(None, "format", f"unknown format {requested!r}: use one of {', '.join(PARSERS)}")]
            )
        return requested
    detected = detect_format(file, filename=filename)
    if detected is None:
        ErrorLog.fail(
            f"the format could not be detected ({describe_first_item(file)}): name it with --format",
            file=filename,
            line=1,
        )
    assert detected is not None
    return detected


# --- prompt pools and borrowed arrivals ------------------------------------------------------------


def prompt_pool_load(
    *,
    source: str,
    token_counter: TokenCounter | None = None,
    max_bytes: int | None = None,
    allow_paths: bool = True,
    team_id: int | None = None,
) -> PromptPool:
    """A prompt pool from a stored trace with real content (of team ``team_id``), or from a prompt
    file (any content format)."""
    resolved = source_resolve(source, allow_paths=allow_paths, team_id=team_id)
    if isinstance(resolved, Trace):
        if resolved.is_paired:
            raise TraceImportError(
                [
                    TraceError(
                        None, "pair_with", f"trace {resolved.pk} is itself paired: pick one with real prompts"
                    )
                ]
            )
        prompts = [
            PoolPrompt(
                key=f"{resolved.pk}:{r.request_id}",
                task=r.task,
                tokens=prompt_tokens(prompt=r.prompt, messages=r.messages, token_counter=token_counter),
                prompt=r.prompt,
                messages=r.messages,
                tools=r.tools,
                response_format=r.response_format,
            )
            for r in resolved.requests.order_by("position").iterator(chunk_size=2000)
        ]
        label = f"trace {resolved.pk} “{resolved.name}” ({len(prompts)} prompts)"
        return PromptPool(label=label, prompts=prompts)
    path = resolved
    with path.open("rb") as raw:
        limit = max_bytes or settings.SPECREVIEW_TRACE_MAX_BYTES
        file_hash_limited(raw, max_bytes=limit, filename=path.name)
        fh, _ = file_content(raw, filename=path.name, max_bytes=limit)
        fmt = format_resolve(fh, filename=inner_filename(path.name), requested=None)
        if PARSERS[fmt].kind == TIMING:
            raise TraceImportError([TraceError(None, "pair_with", f"{path.name} has no prompts ({fmt})")])
        builder = TraceBuilder(
            fh,
            filename=path.name,
            options=ImportOptions(
                source_format=fmt, token_counter=token_counter, arrival=arrival_spec_parse("constant:1")
            ),
        )
        prompts = [
            PoolPrompt(
                key=f"{path.name}:{row[1]}",
                task=row[9],
                tokens=row[14],
                prompt=row[3],
                messages=row[4],
                tools=row[12],
                response_format=row[11],
            )
            for row, _ in builder.rows()
        ]
        builder.errors.raise_if_any()
    shown = path.name if path.parent.name in ("", ".") else f"{path.parent.name}/{path.name}"
    return PromptPool(label=f"file {shown} ({len(prompts)} prompts, {fmt})", prompts=prompts)


def borrowed_arrivals_load(
    source: str, *, max_bytes: int, allow_paths: bool, team_id: int | None = None
) -> tuple[list[float], str]:
    """Arrival offsets (s, from 0, sorted) of a stored trace (of team ``team_id``) or a timing file,
    and a label."""
    resolved = source_resolve(source, allow_paths=allow_paths, team_id=team_id)
    if isinstance(resolved, Trace):
        # a session's later turns follow its answers: only first turns are arrivals
        first_turns = resolved.requests.filter(turn=0).order_by("position")
        values = list(first_turns.values_list("arrival_s", flat=True))
        label = f"trace {resolved.pk}"
    else:
        with resolved.open("rb") as raw:
            file_hash_limited(raw, max_bytes=max_bytes, filename=resolved.name)
            fh, _ = file_content(raw, filename=resolved.name, max_bytes=max_bytes)
            fmt = format_resolve(fh, filename=inner_filename(resolved.name), requested=None)
            if PARSERS[fmt].kind == PROMPTS:
                raise TraceImportError(
                    [TraceError(None, "arrival", f"{resolved.name} has no arrival times ({fmt})")]
                )
            errors = ErrorLog(file=resolved.name)
            ctx = ParseContext(file=resolved.name, errors=errors)
            values = []
            for record in PARSERS[fmt]().parse(fh, ctx):
                if record.output_tokens == 0:
                    continue  # failed requests are skipped on import too
                value = record.clock_s if record.clock_s is not None else record.data.get("arrival_s")
                if isinstance(value, int | float) and math.isfinite(value):
                    values.append(float(value))
            errors.raise_if_any()
        label = resolved.name
    if not values:
        raise TraceImportError([TraceError(None, "arrival", f"{label} has no arrival times")])
    values.sort()
    first = values[0]
    return [v - first for v in values], label
