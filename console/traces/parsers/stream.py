"""Streaming readers: lines, JSON Lines, JSON arrays and CSV rows from a binary file, never all at once.

Every reader reports problems to the parse context's error log with the line number and keeps going
where it can, so one pass lists every bad line.
"""

from __future__ import annotations

import codecs
import csv
import json
from collections.abc import Iterator
from typing import IO, Any

from console.traces.errors import ErrorLog

READ_CHUNK = 1 << 20
MAX_ARRAY_ELEMENT_CHARS = 64 << 20


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON (numbers must be finite)")


# one decoder for the process: json.loads(..., parse_constant=...) would build a new one per line
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _loads(text: str) -> Any:
    return _DECODER.decode(text)


def json_error_message(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON: {exc.msg} at column {exc.colno}"
    return f"invalid JSON: {exc}"


def text_lines(file: IO[bytes], errors: ErrorLog) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without the line break) for every line; non-UTF-8 lines are reported."""
    file.seek(0)
    for number, raw in enumerate(file, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            errors.add(
                number, None, f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}"
            )
            continue
        if number == 1 and text.startswith("\ufeff"):
            text = text[1:]
        yield number, text.rstrip("\r\n")


def json_lines(file: IO[bytes], errors: ErrorLog) -> Iterator[tuple[int, Any]]:
    """(line number, decoded value) for every non-blank line; invalid JSON is reported and skipped."""
    for number, text in text_lines(file, errors):
        if not text.strip():
            continue
        try:
            yield number, _loads(text)
        except ValueError as exc:
            errors.add(number, None, json_error_message(exc))


def csv_rows(file: IO[bytes], errors: ErrorLog) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row as a dict keyed by the header) for every data row of a CSV with a header."""
    lines = (text for _, text in text_lines(file, errors))
    reader = csv.reader(lines)
    header: list[str] | None = None
    for row in reader:
        if header is None:
            header = [h.strip() for h in row]
            continue
        if not row or all(not cell.strip() for cell in row):
            continue
        line = reader.line_num
        if len(row) != len(header):
            errors.add(line, None, f"has {len(row)} columns, the header has {len(header)}")
            continue
        yield line, dict(zip(header, row, strict=True))


def json_array(file: IO[bytes], errors: ErrorLog) -> Iterator[tuple[int, Any]]:
    """(line number where it starts, element) for each element of a top-level JSON array, incrementally."""
    file.seek(0)
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    utf8 = codecs.getincrementaldecoder("utf-8")()
    buf = ""
    pos = 0
    line = 1
    eof = False
    offset = 0

    def more() -> bool:
        nonlocal buf, pos, eof, offset
        if eof:
            return False
        chunk = file.read(READ_CHUNK)
        try:
            text = utf8.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            errors.add(
                line, None, f"not valid UTF-8: byte 0x{chunk[exc.start]:02x} at byte {offset + exc.start}"
            )
            eof = True
            return False
        offset += len(chunk)
        if not chunk:
            eof = True
        buf = buf[pos:] + text
        pos = 0
        if buf.startswith("\ufeff") and offset == len(chunk):
            buf = buf[1:]
        return bool(text) or not eof

    def skip_ws() -> bool:
        nonlocal pos, line
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                if buf[pos] == "\n":
                    line += 1
                pos += 1
            if pos < len(buf):
                return True
            if not more():
                return False

    if not skip_ws() or buf[pos] != "[":
        if not errors:
            errors.add(line, None, "expected a JSON array ('[') at the start of the file")
        return
    pos += 1
    first = True
    while True:
        if not skip_ws():
            errors.add(line, None, "invalid JSON: the array is not closed (missing ']')")
            return
        if buf[pos] == "]":
            pos += 1
            if skip_ws():
                errors.add(line, None, "invalid JSON: extra data after the closing ']'")
            return
        if not first:
            if buf[pos] != ",":
                errors.add(line, None, f"invalid JSON: expected ',' or ']' but found {buf[pos]!r}")
                return
            pos += 1
            if not skip_ws():
                errors.add(line, None, "invalid JSON: the array is not closed (missing ']')")
                return
        first = False
        start_line = line
        while True:
            try:
                value, end = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError as exc:
                if len(buf) - pos > MAX_ARRAY_ELEMENT_CHARS or not more():
                    errors.add(line, None, json_error_message(exc))
                    return
                continue
            except ValueError as exc:
                errors.add(line, None, json_error_message(exc))
                return
            if end >= len(buf) and not eof and more():
                continue  # a number might continue in the next chunk
            break
        line += buf.count("\n", pos, end)
        pos = end
        yield start_line, value
