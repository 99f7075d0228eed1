"""Writes for traces: import (one transaction, nothing stored on error), demo import, delete."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import ProtectedError

from console.traces.arrivals import ArrivalSpec, ArrivalSpecError, arrival_spec_parse
from console.traces.compression import gzip_open_checked, inner_filename, is_gzip
from console.traces.errors import ErrorLog, TraceError, TraceImportError
from console.traces.importer import JSON_FIELDS, ROW_FIELDS, ImportOptions, TraceBuilder
from console.traces.models import Trace, TraceRequest
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
from console.traces.sessions import (
    ThinkTimeSpec,
    ThinkTimeSpecError,
    think_time_spec_parse,
    turns_option_problem,
)
from console.traces.tokens import ESTIMATE_NAME, TokenCounter, prompt_tokens

HASH_CHUNK = 1 << 20
SEED_MAX = 2**63 - 1  # Trace.seed and TraceRequest.seed are 64-bit signed columns
NAME_MAX_CHARS = Trace._meta.get_field("name").max_length or 200
TASK_MAX_CHARS = TraceRequest._meta.get_field("task").max_length or 60
BATCH_SIZE = 2000
DEMO_TRACE_PATH = Path(__file__).resolve().parent / "demo" / "demo_trace.jsonl"
DEMO_TRACE_NAME = "Demo: 30 real prompts (code, chat, math, translation, tools, JSON)"


@dataclass(frozen=True)
class TraceImportResult:
    trace: Trace
    created: bool
    message: str


class TraceInUseError(Exception):
    """The trace is used by experiments and cannot be deleted."""


# --- reading ----------------------------------------------------------------------------------------


def _raw(file: Any) -> IO[bytes]:
    # Django's File/UploadedFile wraps the real file object; the parsers want the plain one.
    inner = getattr(file, "file", None)
    return inner if inner is not None and hasattr(inner, "read") else file


def _hash_limited(file: IO[bytes], *, max_bytes: int, filename: str) -> tuple[str, int]:
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


def _content(file: IO[bytes], *, filename: str, max_bytes: int) -> tuple[IO[bytes], int | None]:
    """The bytes to parse: the file itself, or a checked ``GzipFile`` over it (and its decompressed size)."""
    if is_gzip(file):
        return gzip_open_checked(file, filename=filename, max_bytes=max_bytes)
    return file, None


def _shared_path(name: str) -> Path:
    root = Path(settings.SPECREVIEW_SHARED_DATA).resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise TraceImportError([TraceError(None, "pair_with", f"no shared data file {name!r}")])
    return path


def _resolve_source(source: str, *, allow_paths: bool = True) -> Trace | Path:
    """A trace (``12``, ``trace:12``), a shared-data file (``shared:prompts/...``) or a file path.

    Pages and the API pass ``allow_paths=False``: a server path must never be read on a user's behalf.
    """
    text = str(source).strip()
    if text.startswith("trace:"):
        text = text.removeprefix("trace:")
        if not text.isdigit():
            raise TraceImportError([TraceError(None, None, f"{source!r} is not a trace id")])
    if text.isdigit():
        trace = Trace.objects.filter(pk=int(text)).first()
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


def _format_for(
    file: IO[bytes], *, filename: str, requested: str | None, mapping: FieldMapping | None = None
) -> str:
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
) -> PromptPool:
    """A prompt pool from a stored trace with real content, or from a prompt file (any content format)."""
    resolved = _resolve_source(source, allow_paths=allow_paths)
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
        _hash_limited(raw, max_bytes=limit, filename=path.name)
        fh, _ = _content(raw, filename=path.name, max_bytes=limit)
        fmt = _format_for(fh, filename=inner_filename(path.name), requested=None)
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


def _borrowed_arrivals(source: str, *, max_bytes: int, allow_paths: bool) -> tuple[list[float], str]:
    """Arrival offsets (s, from 0, sorted) of a stored trace or a timing file, and a label."""
    resolved = _resolve_source(source, allow_paths=allow_paths)
    if isinstance(resolved, Trace):
        # a session's later turns follow its answers: only first turns are arrivals
        first_turns = resolved.requests.filter(turn=0).order_by("position")
        values = list(first_turns.values_list("arrival_s", flat=True))
        label = f"trace {resolved.pk}"
    else:
        with resolved.open("rb") as raw:
            _hash_limited(raw, max_bytes=max_bytes, filename=resolved.name)
            fh, _ = _content(raw, filename=resolved.name, max_bytes=max_bytes)
            fmt = _format_for(fh, filename=inner_filename(resolved.name), requested=None)
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


# --- writing ----------------------------------------------------------------------------------------


# _CopyWriter.write puts the JSON texts at these positions of a row
_JSON_POSITIONS = (4, 11, 12, 13)
assert tuple(ROW_FIELDS.index(f) for f in JSON_FIELDS) == _JSON_POSITIONS


def _use_copy() -> bool:
    """Whether rows go in by COPY (Postgres) rather than bulk_create (SQLite and others)."""
    return connection.vendor == "postgresql"


class _CopyWriter:
    """Postgres COPY: rows stream to the server as they are parsed (psycopg formats each row)."""

    def __init__(self, trace: Trace, stack: ExitStack):
        meta = TraceRequest._meta
        columns = ["trace_id"] + [str(meta.get_field(f).column) for f in ROW_FIELDS]  # type: ignore[union-attr]
        cursor = stack.enter_context(connection.cursor())
        sql = f"COPY {connection.ops.quote_name(meta.db_table)} ({', '.join(columns)}) FROM STDIN"
        self.copy = stack.enter_context(cursor.copy(sql))
        self.trace_id = trace.pk

    def write(self, rows: Iterable[tuple[tuple, tuple]]) -> None:
        trace_id = self.trace_id
        write_row = self.copy.write_row
        # the JSON columns go as the canonical text the builder made for the content hash
        for row, (messages, response_format, tools, metadata) in rows:
            write_row(
                (trace_id, *row[:4], messages, *row[5:11], response_format, tools, metadata, *row[14:])
            )


class _BulkWriter:
    """Other databases (SQLite): bulk_create in batches."""

    def __init__(self, trace: Trace):
        self.trace = trace

    def write(self, rows: Iterable[tuple[tuple, tuple]]) -> None:
        batch: list[TraceRequest] = []
        for row, _ in rows:
            batch.append(TraceRequest(trace=self.trace, **dict(zip(ROW_FIELDS, row, strict=True))))
            if len(batch) >= BATCH_SIZE:
                TraceRequest.objects.bulk_create(batch)
                batch = []
        if batch:
            TraceRequest.objects.bulk_create(batch)


def _write(trace: Trace, rows: Iterable[tuple[tuple, tuple]]) -> None:
    with ExitStack() as stack:
        writer = _CopyWriter(trace, stack) if _use_copy() else _BulkWriter(trace)
        writer.write(rows)


def _sort_by_arrival(trace: Trace, *, count: int) -> None:
    """Renumber positions by (arrival, file order); record each request's file order in its metadata."""
    table = connection.ops.quote_name(TraceRequest._meta.db_table)
    with connection.cursor() as cursor:
        # move every position out of the way first: the (trace, position) unique check is per row
        cursor.execute(f"UPDATE {table} SET position = position + %s WHERE trace_id = %s", [count, trace.pk])
        if connection.vendor == "postgresql":
            meta = "metadata = r.metadata || jsonb_build_object('source_index', r.source_index)"
            target = f"{table} AS r"
            join = "r.id = s.id"
        else:
            meta = "metadata = json_set(metadata, '$.source_index', source_index)"
            target = table
            join = f"{table}.id = s.id"
        cursor.execute(
            f"UPDATE {target} SET position = s.rn - 1, {meta} FROM (SELECT id, ROW_NUMBER() OVER "
            f"(ORDER BY arrival_s, source_index) AS rn FROM {table} WHERE trace_id = %s) AS s WHERE {join}",
            [trace.pk],
        )


def _import_key(sha256: str, options: dict[str, Any]) -> str:
    return hashlib.sha256(f"{sha256}\n{json.dumps(options, sort_keys=True)}".encode()).hexdigest()


class _SameContent(Exception):
    def __init__(self, trace: Trace):
        self.trace = trace


def trace_import(
    *,
    file: IO[bytes] | Any,
    name: str,
    uploaded_by: Any | None,
    filename: str = "",
    source_format: str | None = None,
    arrival: str | None = None,
    pair_with: str | None = None,
    holdout_fraction: float = 0.3,
    seed: int = 0,
    default_max_tokens: int = 256,
    default_task: str | None = None,
    max_bytes: int | None = None,
    max_tokens_ceiling: int | None = None,
    token_counter: TokenCounter | None = None,
    token_counter_name: str = "",
    error_cap: int = 100,
    allow_paths: bool = True,
    mapping: FieldMapping | None = None,
    turns: str = "first",
    think_time: str | None = None,
) -> TraceImportResult:
    """Import a trace file in one transaction; raise ``TraceImportError`` (nothing stored) on bad input.

    ``arrival``: ``constant:RATE`` / ``poisson:RATE`` / ``gamma:RATE:CV`` (requests/s) / ``borrow:SOURCE``
    / ``trace``. ``pair_with``: prompt pool for a timing-only trace (trace id or file path).
    ``holdout_fraction`` in [0, 1]. ``max_bytes``: file size limit (bytes). ``token_counter``: counts
    tokens in a string (default: the documented chars/4 estimate). The same file with the same options
    returns the stored trace (``created=False``) instead of a copy. ``allow_paths=False`` (pages, API)
    limits ``pair_with`` and ``borrow:`` to stored traces and shared-data files. ``mapping``: where a
    prompt set of any layout keeps its prompt (parsers/mapped.py); it selects the mapped format. A gzip
    file is read through the compression, with ``max_bytes`` applied to the decompressed bytes.
    limits ``pair_with`` and ``borrow:`` to stored traces and shared-data files. ``turns``: ``first``
    (multi-turn prompt sets give one request per conversation) or ``all`` (every turn, as a session);
    ``think_time``: ``const:SECONDS`` / ``exp:MEAN`` / ``none``, for later turns that give none.
    """
    file = _raw(file)
    filename = filename or Path(str(getattr(file, "name", "") or "upload")).name
    max_bytes = max_bytes or settings.SPECREVIEW_TRACE_MAX_BYTES
    # TraceRequest.max_tokens is a 32-bit column, whatever the configured ceiling says
    ceiling = min(max_tokens_ceiling or settings.SPECREVIEW_MAX_TOKENS_CEILING, 2**31 - 1)
    bad = _option_errors(
        name=name,
        holdout_fraction=holdout_fraction,
        seed=seed,
        default_max_tokens=default_max_tokens,
        default_task=default_task,
        ceiling=ceiling,
    )
    spec: ArrivalSpec | None = None
    if arrival:
        try:
            spec = arrival_spec_parse(arrival)
        except ArrivalSpecError as exc:
            bad.append(TraceError(None, "arrival", str(exc)))
    think: ThinkTimeSpec | None = None
    problem = turns_option_problem(turns)
    if problem:
        bad.append(TraceError(None, "turns", problem))
    if think_time:
        try:
            think = think_time_spec_parse(think_time)
        except ThinkTimeSpecError as exc:
            bad.append(TraceError(None, "think_time", str(exc)))
    if bad:
        raise TraceImportError(bad)

    sha256, size = _hash_limited(file, max_bytes=max_bytes, filename=filename)
    file, decompressed_size = _content(file, filename=filename, max_bytes=max_bytes)
    fmt = _format_for(file, filename=inner_filename(filename), requested=source_format, mapping=mapping)
    counter_name = token_counter_name or (ESTIMATE_NAME if token_counter is None else "custom tokenizer")
    options = {
        "format": fmt,
        "arrival": str(spec) if spec else "",
        "pair_with": str(pair_with or ""),
        "holdout": holdout_fraction,
        "seed": seed,
        "default_max_tokens": default_max_tokens,
        "default_task": default_task or "",
        "tokens": counter_name,
    }
    if mapping is not None:
        options["mapping"] = mapping.as_dict()  # only when given: earlier traces keep their import keys
    if turns != "first" or think is not None:  # absent by default: older imports keep their key
        options["turns"] = turns
        options["think_time"] = str(think) if think else ""
    import_key = _import_key(sha256, options)
    existing = Trace.objects.filter(import_key=import_key).first()
    if existing is not None:
        return TraceImportResult(existing, False, f"This file was already imported as trace {existing.pk}.")

    pool = None
    if pair_with:
        if PARSERS[fmt].kind != TIMING:
            raise TraceImportError(
                [
                    TraceError(
                        None,
                        "pair_with",
                        f"{fmt} files carry their own prompts: pairing is for timing traces",
                    )
                ]
            )
        pool = prompt_pool_load(
            source=pair_with, token_counter=token_counter, max_bytes=max_bytes, allow_paths=allow_paths
        )
    borrowed = None
    if spec is not None and spec.kind == "borrow":
        borrowed, label = _borrowed_arrivals(spec.source, max_bytes=max_bytes, allow_paths=allow_paths)
        spec = ArrivalSpec("borrow", source=label)
    builder = TraceBuilder(
        file,
        filename=filename,
        options=ImportOptions(
            source_format=fmt,
            arrival=spec,
            borrowed_arrivals=borrowed,
            pool=pool,
            holdout_fraction=holdout_fraction,
            seed=seed,
            default_max_tokens=default_max_tokens,
            default_task=default_task,
            max_tokens_ceiling=ceiling,
            token_counter=token_counter,
            token_counter_name=counter_name,
            error_cap=error_cap,
            mapping=mapping,
            turns=turns,
            think_time=think,
        ),
    )
    try:
        with transaction.atomic():
            trace = Trace.objects.create(
                name=name.strip() or filename[:NAME_MAX_CHARS],
                sha256=sha256,
                source_filename=filename[:500],
                source_format=fmt,
                size_bytes=size,
                holdout_fraction=holdout_fraction,
                seed=seed,
                import_key=import_key,
                uploaded_by=uploaded_by,
            )
            _write(trace, builder.rows())
            builder.errors.raise_if_any()
            count = builder.summary.count
            if builder.shift_s:
                TraceRequest.objects.filter(trace=trace).update(arrival_s=_plus(builder.shift_s))
            if builder.out_of_order:
                _sort_by_arrival(trace, count=count)
            same = (
                Trace.objects.filter(
                    content_sha256=builder.content_sha256, holdout_fraction=holdout_fraction, seed=seed
                )
                .exclude(pk=trace.pk)
                .first()
            )
            if same is not None:
                raise _SameContent(same)
            trace.content_sha256 = builder.content_sha256
            trace.request_count = count
            trace.arrival_spec = builder.arrival_label[:200]
            trace.paired_with = pool.label[:500] if pool is not None and PARSERS[fmt].kind == TIMING else ""
            trace.warnings = builder.warnings
            trace.summary = builder.summary_dict()
            trace.metadata = {
                "import_options": options,
                "format_label": PARSERS[fmt].label,
                "content": PARSERS[fmt].kind,
                "pool": pool.describe() if pool is not None else None,
                "arrival_shift_s": builder.shift_s,
            }
            if decompressed_size is not None:
                trace.metadata["compression"] = {"format": "gzip", "decompressed_bytes": decompressed_size}
            trace.save()
    except _SameContent as same_content:
        other = same_content.trace
        return TraceImportResult(other, False, f"The same requests are already stored as trace {other.pk}.")
    message = f"Imported {count} requests as trace {trace.pk}."
    if trace.warnings:
        message += f" {len(trace.warnings)} warning(s): see the trace page."
    return TraceImportResult(trace, True, message)


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
) -> TracePreview:
    """The first ``limit`` requests (id, task, prompt or messages, max_tokens, metadata) as the import
    would build them, through the same detection, decompression, mapping and validation; stores nothing.

    A file that cannot be read at all (size, gzip, format) raises ``TraceImportError``; problems in
    records come back in ``errors`` with the requests before them, so a mapping can be fixed by eye.
    """
    file = _raw(file)
    filename = filename or Path(str(getattr(file, "name", "") or "upload")).name
    max_bytes = max_bytes or settings.SPECREVIEW_TRACE_MAX_BYTES
    _hash_limited(file, max_bytes=max_bytes, filename=filename)
    file, _ = _content(file, filename=filename, max_bytes=max_bytes)
    fmt = _format_for(file, filename=inner_filename(filename), requested=source_format, mapping=mapping)
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


def _option_errors(
    *,
    name: str,
    holdout_fraction: float,
    seed: int,
    default_max_tokens: int,
    default_task: str | None,
    ceiling: int,
) -> list[TraceError]:
    """The import options a user typed, checked against what the columns hold (never a database error)."""
    bad: list[TraceError] = []
    if len(name.strip()) > NAME_MAX_CHARS:
        bad.append(
            TraceError(
                None, "name", f"must have at most {NAME_MAX_CHARS} characters, got {len(name.strip())}"
            )
        )
    if not (0.0 <= holdout_fraction <= 1.0) or not math.isfinite(holdout_fraction):
        bad.append(TraceError(None, "holdout", f"must be between 0 and 1, got {holdout_fraction}"))
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        bad.append(
            TraceError(None, "seed", f"must be an integer from 0 to {SEED_MAX} (2^63 - 1), got {seed}")
        )
    if (
        isinstance(default_max_tokens, bool)
        or not isinstance(default_max_tokens, int)
        or not (1 <= default_max_tokens <= ceiling)
    ):
        bad.append(
            TraceError(
                None,
                "default_max_tokens",
                f"must be an integer from 1 to {ceiling} (SPECREVIEW_MAX_TOKENS_CEILING), got {default_max_tokens}",
            )
        )
    if default_task is not None and len(default_task) > TASK_MAX_CHARS:
        bad.append(
            TraceError(
                None, "task", f"must have at most {TASK_MAX_CHARS} characters, got {len(default_task)}"
            )
        )
    return bad


def _plus(shift: float):
    from django.db.models import F

    return F("arrival_s") + shift


def trace_import_path(*, path: str | Path, name: str = "", uploaded_by: Any | None = None, **options: Any):
    """``trace_import`` for a file on disk (the CLI, the demo, tests)."""
    path = Path(path)
    with path.open("rb") as fh:
        return trace_import(
            file=fh, name=name or path.stem, uploaded_by=uploaded_by, filename=path.name, **options
        )


def trace_import_demo(*, uploaded_by: Any | None) -> TraceImportResult:
    """Import the bundled demo trace, or return it if it is already stored (idempotent)."""
    return trace_import_path(path=DEMO_TRACE_PATH, name=DEMO_TRACE_NAME, uploaded_by=uploaded_by, seed=0)


def trace_delete(*, trace: Trace) -> None:
    """Delete a trace and its requests; refused (``TraceInUseError``) if an experiment or a result uses it."""
    names = sorted(str(e) for e in trace.experiments.all())
    if names:
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise TraceInUseError(
            f"Trace {trace.pk} is used by {len(names)} experiment(s) ({shown}); delete those first. "
            "Traces are evidence for decisions, so they are never deleted from under an experiment."
        )
    try:
        with transaction.atomic():
            trace.delete()
    except ProtectedError as exc:
        raise TraceInUseError(
            f"Trace {trace.pk} cannot be deleted: {len(exc.protected_objects)} stored result(s) refer to its requests."
        ) from None


__all__ = [
    "TraceImportError",
    "TraceImportResult",
    "TraceInUseError",
    "prompt_pool_load",
    "trace_delete",
    "trace_import",
    "trace_import_demo",
    "trace_import_path",
    "trace_preview",
]
