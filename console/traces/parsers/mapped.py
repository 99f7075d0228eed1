"""Field-mapped prompt sets: any JSON array, JSON Lines, CSV or Parquet file whose prompt sits under a
field the user names (``--prompt-field``), for the many prompt sets no built-in parser knows.

The mapping says where the prompt is (a dotted path to a string, or to a list of chat messages), and
optionally the id, the task and the reference fields graders need (kept in ``metadata``). A record
whose prompt is missing or is not text is a located error naming the record and the path, so a wrong
mapping never imports a set of empty requests. Paths and keep-field lists are bounded: a mapping is
user input too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from console.traces.errors import TraceError, TraceImportError
from console.traces.parsers.base import PROMPTS, ParseContext, Parser, Record
from console.traces.parsers.stream import csv_rows, json_array, json_lines

PATH_MAX_CHARS = 200
PATH_MAX_PARTS = 8
KEEP_FIELDS_MAX = 16
SYSTEM_PROMPT_MAX_CHARS = 32_768
PARQUET_MAGIC = b"PAR1"
PARQUET_BATCH_ROWS = 64
_MISSING = object()


@dataclass(frozen=True)
class FieldMapping:
    """Where a record keeps its prompt, id, task and references (dotted paths), and what to add."""

    prompt_field: str
    id_field: str | None = None
    task_field: str | None = None
    system_prompt: str | None = None
    keep_fields: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The mapping as recorded in a trace's import options (part of its import key)."""
        return {
            "prompt_field": self.prompt_field,
            "id_field": self.id_field or "",
            "task_field": self.task_field or "",
            "system_prompt": self.system_prompt or "",
            "keep_fields": list(self.keep_fields),
        }


def _path_errors(name: str, path: str) -> list[TraceError]:
    if not path.strip():
        return [TraceError(None, name, "must be a field name or a dotted path (a.b.c), got nothing")]
    if len(path) > PATH_MAX_CHARS:
        return [TraceError(None, name, f"must have at most {PATH_MAX_CHARS} characters, got {len(path)}")]
    parts = path.split(".")
    if len(parts) > PATH_MAX_PARTS:
        return [TraceError(None, name, f"must have at most {PATH_MAX_PARTS} parts (a.b.c), got {len(parts)}")]
    if any(not p.strip() for p in parts):
        return [TraceError(None, name, f"{path!r} has an empty part: write a.b.c")]
    if "\x00" in path:
        return [TraceError(None, name, "contains a NUL character")]
    return []


def field_mapping_parse(
    *,
    prompt_field: str | None,
    id_field: str | None = None,
    task_field: str | None = None,
    system_prompt: str | None = None,
    keep_fields: list[str] | tuple[str, ...] | None = None,
) -> FieldMapping | None:
    """The mapping, None when no prompt field is given, or ``TraceImportError`` naming each bad option.

    The other options mean nothing without a prompt field, so giving them alone is an error too.
    """
    prompt_field = (prompt_field or "").strip()
    id_field = (id_field or "").strip() or None
    task_field = (task_field or "").strip() or None
    system_prompt = system_prompt or None
    keep = tuple(k.strip() for k in keep_fields or () if k.strip())
    if not prompt_field:
        extra = [n for n, v in (("id_field", id_field), ("task_field", task_field)) if v]
        extra += ["system_prompt"] if system_prompt else []
        extra += ["keep_field"] if keep else []
        if extra:
            raise TraceImportError(
                [TraceError(None, n, "needs a prompt field (--prompt-field) to map with") for n in extra]
            )
        return None
    bad = _path_errors("prompt_field", prompt_field)
    for name, value in (("id_field", id_field), ("task_field", task_field)):
        if value is not None:
            bad += _path_errors(name, value)
    if len(keep) > KEEP_FIELDS_MAX:
        bad.append(TraceError(None, "keep_field", f"at most {KEEP_FIELDS_MAX} fields, got {len(keep)}"))
    else:
        for value in keep:
            bad += _path_errors("keep_field", value)
    if system_prompt is not None and len(system_prompt) > SYSTEM_PROMPT_MAX_CHARS:
        bad.append(
            TraceError(
                None,
                "system_prompt",
                f"must have at most {SYSTEM_PROMPT_MAX_CHARS} characters, got {len(system_prompt)}",
            )
        )
    if bad:
        raise TraceImportError(bad)
    return FieldMapping(prompt_field, id_field, task_field, system_prompt, tuple(dict.fromkeys(keep)))


def lookup(record: Any, path: str) -> Any:
    """The value at a dotted path (``a.b.0.c``: list items by index), or ``_MISSING``.

    A key that itself contains dots (a CSV column ``meta.answer``) is found first as a whole.
    """
    if isinstance(record, dict) and path in record:
        return record[path]
    value = record
    for part in path.split("."):
        if isinstance(value, dict):
            if part not in value:
                return _MISSING
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _is_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in value)
    )


def is_parquet(file: IO[bytes]) -> bool:
    file.seek(0)
    head = file.read(4)
    file.seek(0)
    return head == PARQUET_MAGIC


def container(file: IO[bytes]) -> str:
    """How the records are laid out: 'parquet', 'array' (JSON array), 'json' (JSON Lines) or 'csv'."""
    if is_parquet(file):
        return "parquet"
    file.seek(0)
    head = file.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    file.seek(0)
    if head.startswith(b"["):
        return "array"
    if head.startswith(b"{") or not head:
        return "json"
    return "csv"


def parquet_rows(file: IO[bytes], ctx: ParseContext) -> Iterator[tuple[int, Any]]:
    """(1-based row number, row as a dict) in small batches, so a large file is never held as one table.

    Parquet compresses inside the file too, so the size limit is applied again to what it decodes to:
    first to the sizes its footer declares, then to the decoded batches as they come.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from django.conf import settings

    max_bytes = settings.SPECREVIEW_TRACE_MAX_BYTES
    file.seek(0)
    try:
        table = pq.ParquetFile(file)
        meta = table.metadata
        declared = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if declared > max_bytes:
            ctx.errors.add(None, None, _parquet_too_large(max_bytes, f"declares {declared:,} bytes of data"))
            return
        number = 0
        decoded = 0
        for batch in table.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            decoded += batch.nbytes
            if decoded > max_bytes:
                ctx.errors.add(
                    number + 1, None, _parquet_too_large(max_bytes, f"decodes to over {decoded:,} bytes")
                )
                return
            for row in batch.to_pylist():
                number += 1
                yield number, _json_safe(row)
    except (pa.ArrowException, OSError, ValueError, IndexError) as exc:
        ctx.errors.add(None, None, f"not a readable Parquet file: {str(exc)[:300]}")


def _parquet_too_large(max_bytes: int, what: str) -> str:
    return (
        f"the Parquet file {what}, over the size limit of {max_bytes:,} bytes "
        "(SPECREVIEW_TRACE_MAX_BYTES, applied to the decoded data)"
    )


def records(file: IO[bytes], ctx: ParseContext) -> Iterator[tuple[int, Any]]:
    """(line or row number, record) from whichever container the file is."""
    kind = container(file)
    if kind == "parquet":
        yield from parquet_rows(file, ctx)
    elif kind == "array":
        yield from json_array(file, ctx.errors, ctx.limits)
    elif kind == "json":
        yield from json_lines(file, ctx.errors, ctx.limits)
    else:
        yield from csv_rows(file, ctx.errors, ctx.limits)


def _json_safe(value: Any) -> Any:
    """A Parquet cell as JSON can hold it (dates, bytes and decimals as text)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


class MappedParser(Parser):
    name = "mapped"
    label = "Field-mapped prompt set (JSON, JSONL, CSV or Parquet; --prompt-field names the prompt)"
    kind = PROMPTS

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        return False  # chosen by giving a prompt field, never guessed

    def parse(self, file: IO[bytes], ctx: ParseContext) -> Iterator[Record]:
        mapping = ctx.mapping
        if mapping is None:
            ctx.errors.add(None, "prompt_field", "the mapped format needs a prompt field (--prompt-field)")
            return
        for number, (line, item) in enumerate(records(file, ctx), start=1):
            if not isinstance(item, dict):
                ctx.errors.add(line, None, f"each record must be an object, got {type(item).__name__}")
                continue
            data = self.convert(line, item, mapping, ctx, number=number)
            if data is not None:
                data.setdefault("max_tokens", ctx.default_max_tokens)
                yield Record(line, data)

    def convert(
        self, line: int, item: dict, mapping: FieldMapping, ctx: ParseContext, *, number: int
    ) -> dict | None:
        """The request for one record; ``line`` locates errors, ``number`` (1-based position) names it."""
        ok = True
        data: dict[str, Any] = {}
        value = lookup(item, mapping.prompt_field)
        if isinstance(value, str) and value.strip():
            prompt: str | None = value
            messages = None
        elif _is_messages(value):
            prompt, messages = None, value
        else:
            what = "is missing" if value is _MISSING else f"is {_shown(value)}"
            ctx.errors.add(
                line,
                mapping.prompt_field,
                f"{what}: the prompt must be non-empty text or a list of chat messages [{{role, content}}]",
            )
            ok = False
            prompt, messages = None, None
        data["id"] = f"record-{number}"  # not the line: a compact JSON array has every record on line 1
        if mapping.id_field:
            value = lookup(item, mapping.id_field)
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
                data["id"] = str(value)
            else:
                what = "is missing" if value is _MISSING else f"is {_shown(value)}"
                ctx.errors.add(line, mapping.id_field, f"{what}: the id must be text or an integer")
                ok = False
        data["task"] = ctx.default_task or "unknown"
        if mapping.task_field:
            value = lookup(item, mapping.task_field)
            if isinstance(value, str) and value.strip():
                data["task"] = value.strip()
            elif value is not _MISSING and value is not None:
                ctx.errors.add(line, mapping.task_field, f"is {_shown(value)}: the task must be text")
                ok = False
        metadata: dict[str, Any] = {}
        for path in mapping.keep_fields:
            value = lookup(item, path)
            if value is _MISSING:
                ctx.errors.add(line, path, "is missing: a kept field must be in every record")
                ok = False
            else:
                metadata[path] = value
        if not ok:
            return None
        if mapping.system_prompt:
            system = {"role": "system", "content": mapping.system_prompt}
            messages = [system, *(messages or [{"role": "user", "content": prompt}])]
            prompt = None
        if messages is not None:
            data["messages"] = messages
        else:
            data["prompt"] = prompt
        data["metadata"] = metadata
        return data


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return "empty text" if not value.strip() else "text"
    if value is None:
        return "null"
    text = json.dumps(value, default=str)
    return f"a {type(value).__name__} ({text[:60]}{'…' if len(text) > 60 else ''})"
