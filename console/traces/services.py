"""Writes for traces: import (one transaction, nothing stored on error), demo import, delete.

An import runs in steps: check the options, read the file (size, hash, gzip, format), return the
stored trace if this file was imported with these options already, resolve the sources it names
(a prompt pool, borrowed arrivals), build the rows (importer.py), store them (store.py) and record
the trace's summary. sources.py, options.py and store.py hold the steps; this module runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import ProtectedError

from console.accounts.teams import team_default
from console.traces.arrivals import ArrivalSpec
from console.traces.compression import inner_filename
from console.traces.errors import TraceError, TraceImportError
from console.traces.importer import ImportOptions, TraceBuilder
from console.traces.models import RAW_TEXT_PURGED_KEY, Trace
from console.traces.options import NAME_MAX_CHARS, import_key, import_options_parse, import_options_record
from console.traces.parsers import PARSERS, TIMING
from console.traces.parsers.mapped import FieldMapping
from console.traces.redaction import RedactionError, Redactor, patterns_parse, redaction_sentence
from console.traces.sources import (
    borrowed_arrivals_load,
    file_content,
    file_hash_limited,
    file_unwrapped,
    format_resolve,
    prompt_pool_load,
)
from console.traces.store import trace_requests_shift, trace_requests_sort_by_arrival, trace_requests_write
from console.traces.tokens import ESTIMATE_NAME, TokenCounter

DEMO_TRACE_PATH = Path(__file__).resolve().parent / "demo" / "demo_trace.jsonl"
DEMO_TRACE_NAME = "Demo: 30 real prompts (code, chat, math, translation, tools, JSON)"


@dataclass(frozen=True)
class TraceImportResult:
    trace: Trace
    created: bool
    message: str


class TraceInUseError(Exception):
    """The trace is used by experiments and cannot be deleted."""


class _SameContent(Exception):
    def __init__(self, trace: Trace):
        self.trace = trace


def _use_copy() -> bool:
    """Whether rows go in by COPY (Postgres) rather than bulk_create (SQLite and others)."""
    return connection.vendor == "postgresql"


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
    redact: bool = False,
    redact_patterns: str = "",
    team: Any | None = None,
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
    ``turns``: ``first`` (multi-turn prompt sets give one request per conversation) or ``all`` (every
    turn, as a session); ``think_time``: ``const:SECONDS`` / ``exp:MEAN`` / ``none``, for later turns
    that give none. ``redact``: replace e-mail addresses, phone and card numbers, keys and IP
    addresses (and the ``NAME=REGEX`` lines of ``redact_patterns``) by typed placeholders before
    anything is stored (console/traces/redaction.py); the trace's hash is then the redacted text's.
    ``team``: the owner (a ``Team``; None: the installation's default team); the same file is
    recognised, and stored traces are paired with or borrowed from, within that team only.

    Long because: the signature is the import's public options (pages, API, CLI, demo); the body is
    the steps in order, one call each.
    """
    file = file_unwrapped(file)
    team = team or team_default()
    filename = filename or Path(str(getattr(file, "name", "") or "upload")).name
    max_bytes = max_bytes or settings.SPECREVIEW_TRACE_MAX_BYTES
    # TraceRequest.max_tokens is a 32-bit column, whatever the configured ceiling says
    ceiling = min(max_tokens_ceiling or settings.SPECREVIEW_MAX_TOKENS_CEILING, 2**31 - 1)
    spec, think = import_options_parse(
        name=name,
        holdout_fraction=holdout_fraction,
        seed=seed,
        default_max_tokens=default_max_tokens,
        default_task=default_task,
        ceiling=ceiling,
        arrival=arrival,
        turns=turns,
        think_time=think_time,
    )
    upload = _upload_read(
        file, filename=filename, max_bytes=max_bytes, requested=source_format, mapping=mapping
    )
    counter_name = token_counter_name or (ESTIMATE_NAME if token_counter is None else "custom tokenizer")
    options = ImportOptions(
        source_format=upload.source_format,
        arrival=spec,
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
        redactor=trace_redactor(redact=redact, patterns=redact_patterns, team=team),
    )
    recorded = import_options_record(options, pair_with=pair_with)
    key = import_key(upload.sha256, recorded)
    # A trace whose raw text retention purged is no copy of the file any more: import it anew.
    existing = (
        Trace.objects.filter(import_key=key, team=team).exclude(metadata__has_key=RAW_TEXT_PURGED_KEY).first()
    )
    if existing is not None:
        return TraceImportResult(existing, False, f"This file was already imported as trace {existing.pk}.")
    options = _sources_resolve(
        options, pair_with=pair_with, max_bytes=max_bytes, allow_paths=allow_paths, team_id=team.pk
    )
    builder = TraceBuilder(upload.file, filename=upload.filename, options=options)
    try:
        with transaction.atomic():
            trace = _trace_create(
                upload, name=name, options=options, import_key=key, uploaded_by=uploaded_by, team=team
            )
            _requests_store(trace, builder)
            _trace_summarise(trace, builder, recorded=recorded, decompressed_size=upload.decompressed_size)
    except _SameContent as same_content:
        other = same_content.trace
        return TraceImportResult(other, False, f"The same requests are already stored as trace {other.pk}.")
    message = f"Imported {trace.request_count} requests as trace {trace.pk}."
    if options.redactor is not None:
        message += f" {redaction_sentence(options.redactor.summary())}"
    if trace.warnings:
        message += f" {len(trace.warnings)} warning(s): see the trace page."
    return TraceImportResult(trace, True, message)


@dataclass(frozen=True)
class _Upload:
    """The file to parse (gunzipped if it was gzip), its name, and what reading it found: the sha256
    and size (bytes) of the file as uploaded, the decompressed size (bytes; None if not gzip), the
    format."""

    file: IO[bytes]
    filename: str
    sha256: str
    size: int
    decompressed_size: int | None
    source_format: str


def _upload_read(
    file: IO[bytes], *, filename: str, max_bytes: int, requested: str | None, mapping: FieldMapping | None
) -> _Upload:
    sha256, size = file_hash_limited(file, max_bytes=max_bytes, filename=filename)
    content, decompressed_size = file_content(file, filename=filename, max_bytes=max_bytes)
    fmt = format_resolve(content, filename=inner_filename(filename), requested=requested, mapping=mapping)
    return _Upload(content, filename, sha256, size, decompressed_size, fmt)


def _sources_resolve(
    options: ImportOptions, *, pair_with: str | None, max_bytes: int, allow_paths: bool, team_id: int
) -> ImportOptions:
    """The options with the sources they name loaded: the prompt pool a timing trace is paired with,
    and the arrivals (seconds) a ``borrow:`` process takes, its spec then naming where they came from."""
    pool = None
    fmt = options.source_format
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
            source=pair_with,
            token_counter=options.token_counter,
            max_bytes=max_bytes,
            allow_paths=allow_paths,
            team_id=team_id,
        )
    spec, borrowed = options.arrival, None
    if spec is not None and spec.kind == "borrow":
        borrowed, label = borrowed_arrivals_load(
            spec.source, max_bytes=max_bytes, allow_paths=allow_paths, team_id=team_id
        )
        spec = ArrivalSpec("borrow", source=label)
    return replace(options, pool=pool, arrival=spec, borrowed_arrivals=borrowed)


def _trace_create(
    upload: _Upload, *, name: str, options: ImportOptions, import_key: str, uploaded_by: Any | None, team: Any
) -> Trace:
    """The trace row, before its requests (they refer to it); what the import finds is recorded after."""
    return Trace.objects.create(
        name=name.strip() or upload.filename[:NAME_MAX_CHARS],
        sha256=upload.sha256,
        source_filename=upload.filename[:500],
        source_format=upload.source_format,
        size_bytes=upload.size,
        holdout_fraction=options.holdout_fraction,
        seed=options.seed,
        import_key=import_key,
        uploaded_by=uploaded_by,
        team=team,
    )


def _requests_store(trace: Trace, builder: TraceBuilder) -> None:
    """Write the builder's rows as the trace's requests, raise its errors (the transaction then stores
    nothing), shift and sort the arrivals, and refuse content another trace already holds."""
    trace_requests_write(trace, builder.rows(), copy=_use_copy())
    builder.errors.raise_if_any()
    if builder.shift_s:
        trace_requests_shift(trace, shift_s=builder.shift_s)
    if builder.out_of_order:
        trace_requests_sort_by_arrival(trace, count=builder.summary.count)
    same = (
        Trace.objects.filter(
            content_sha256=builder.content_sha256,
            holdout_fraction=trace.holdout_fraction,
            seed=trace.seed,
            team_id=trace.team_id,
        )
        .exclude(pk=trace.pk)
        .exclude(metadata__has_key=RAW_TEXT_PURGED_KEY)
        .first()
    )
    if same is not None:
        raise _SameContent(same)


def _trace_summarise(
    trace: Trace, builder: TraceBuilder, *, recorded: dict[str, Any], decompressed_size: int | None
) -> None:
    """Record on the trace what the import found (content hash, counts, warnings, summary) and how it
    was made (``recorded``: the options as given, the pool, the arrival shift, the compression)."""
    fmt = trace.source_format
    pool = builder.options.pool
    trace.content_sha256 = builder.content_sha256
    trace.request_count = builder.summary.count
    trace.arrival_spec = builder.arrival_label[:200]
    trace.paired_with = pool.label[:500] if pool is not None and PARSERS[fmt].kind == TIMING else ""
    trace.warnings = builder.warnings
    trace.summary = builder.summary_dict()
    trace.metadata = {
        "import_options": recorded,
        "format_label": PARSERS[fmt].label,
        "content": PARSERS[fmt].kind,
        "pool": pool.describe() if pool is not None else None,
        "arrival_shift_s": builder.shift_s,
    }
    if decompressed_size is not None:
        trace.metadata["compression"] = {"format": "gzip", "decompressed_bytes": decompressed_size}
    redactor = builder.options.redactor
    if redactor is not None:
        trace.metadata["redaction"] = {
            "replaced": redactor.summary(),
            "patterns": [kind.name for kind in redactor.extra],
        }
    trace.save()


def trace_redactor(*, redact: bool, patterns: str, team: Any | None = None) -> Redactor | None:
    """The import's (and the preview's) redactor, None when not asked for; a bad team pattern is a
    bad option (``TraceImportError`` naming ``redact_patterns``). A ``team`` that redacts at import
    (``Team.redact_at_import``) redacts every upload, and its own patterns join the upload's."""
    if team is not None and team.redact_at_import:
        redact = True
    if redact and team is not None and team.redaction_patterns.strip():
        patterns = "\n".join(p for p in (team.redaction_patterns, patterns) if p.strip())
    if not redact:
        if patterns.strip():
            raise TraceImportError(
                [TraceError(None, "redact_patterns", "given without redact: turn redaction on")]
            )
        return None
    try:
        return Redactor(extra=patterns_parse(patterns))
    except RedactionError as exc:
        raise TraceImportError([TraceError(None, "redact_patterns", str(exc))]) from None


def trace_import_path(*, path: str | Path, name: str = "", uploaded_by: Any | None = None, **options: Any):
    """``trace_import`` for a file on disk (the CLI, the demo, tests)."""
    path = Path(path)
    with path.open("rb") as fh:
        return trace_import(
            file=fh, name=name or path.stem, uploaded_by=uploaded_by, filename=path.name, **options
        )


def trace_import_demo(*, uploaded_by: Any | None, team: Any | None = None) -> TraceImportResult:
    """Import the bundled demo trace into ``team`` (None: the default team), or return it if it is
    already stored there (idempotent)."""
    return trace_import_path(
        path=DEMO_TRACE_PATH, name=DEMO_TRACE_NAME, uploaded_by=uploaded_by, seed=0, team=team
    )


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
    "TraceImportResult",
    "TraceInUseError",
    "prompt_pool_load",
    "trace_delete",
    "trace_import",
    "trace_redactor",
    "trace_import_demo",
    "trace_import_path",
]
