"""Streaming readers: lines, JSON Lines, JSON arrays and CSV rows from a binary file, never all at once.

Every reader reports problems to the parse context's error log with the line number and keeps going
where it can, so one pass lists every bad line. Hostile input is bounded before it is decoded: a line
(or an array element, or a CSV field) longer than ``Limits.max_line_bytes`` is skipped unread, and a
value nested deeper than ``Limits.max_depth`` is refused before ``json`` recurses into it.
"""

from __future__ import annotations

import codecs
import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from console.traces.errors import ErrorLog

READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class Limits:
    """Caps on one item of an input file: bytes per line (also characters per array element and per
    CSV field) and nesting depth of objects and arrays (the item's own outer braces count as 1)."""

    max_line_bytes: int = 16 << 20
    max_depth: int = 64

    @classmethod
    def from_settings(cls) -> Limits:
        from django.conf import settings

        return cls(
            max_line_bytes=settings.SPECREVIEW_TRACE_MAX_LINE_BYTES,
            max_depth=settings.SPECREVIEW_TRACE_MAX_DEPTH,
        )


def line_too_long_message(limits: Limits) -> str:
    return (
        f"the line is longer than {limits.max_line_bytes:,} bytes (SPECREVIEW_TRACE_MAX_LINE_BYTES): "
        "it was skipped unread"
    )


def element_too_long_message(limits: Limits) -> str:
    return f"an array element is longer than {limits.max_line_bytes:,} characters (SPECREVIEW_TRACE_MAX_LINE_BYTES)"


def too_deep_message(limits: Limits) -> str:
    return f"nested deeper than {limits.max_depth} levels (SPECREVIEW_TRACE_MAX_DEPTH)"


# a JSON string (skipped whole, so brackets inside text do not count) or one bracket
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def nesting_too_deep(text: str, *, max_depth: int, start: int = 0, end: int | None = None) -> bool:
    """Whether the JSON text in ``text[start:end]`` nests objects/arrays deeper than ``max_depth``.

    Counting brackets first (C speed) settles almost every line; only a line with more brackets
    than the cap is scanned token by token.
    """
    end = len(text) if end is None else end
    if text.count("[", start, end) + text.count("{", start, end) <= max_depth:
        return False
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text, start, end):
        token = match.group()
        if token == "[" or token == "{":
            depth += 1
            if depth > max_depth:
                return True
        elif token == "]" or token == "}":
            depth -= 1
    return False


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON (numbers must be finite)")


# one decoder for the process: json.loads(..., parse_constant=...) would build a new one per line
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]


def _loads(text: str) -> Any:
    # the decoder's scanner straight away (what decode() calls after its whitespace checks); a line
    # it does not take whole (leading or trailing blanks, or an error) goes through decode() for the
    # exact result or message
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return _DECODER.decode(text)
    if end != len(text):
        return _DECODER.decode(text)
    return value


def json_error_message(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON: {exc.msg} at column {exc.colno}"
    return f"invalid JSON: {exc}"


def text_lines(file: IO[bytes], errors: ErrorLog, limits: Limits | None = None) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without the line break) for every line; non-UTF-8 lines and lines
    over ``limits.max_line_bytes`` are reported. No line longer than the cap is ever held in memory."""
    cap = (limits or Limits.from_settings()).max_line_bytes
    file.seek(0)
    number = 0
    while raw := file.readline(cap + 1):
        number += 1
        if len(raw) > cap and not raw.endswith(b"\n"):
            errors.add(number, None, line_too_long_message(limits or Limits.from_settings()))
            while raw and not raw.endswith(b"\n"):
                raw = file.readline(READ_CHUNK)
            continue
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


def json_lines(file: IO[bytes], errors: ErrorLog, limits: Limits | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, decoded value) for every non-blank line; invalid JSON is reported and skipped."""
    limits = limits or Limits.from_settings()
    max_depth = limits.max_depth
    for number, text in text_lines(file, errors, limits):
        if not text or text.isspace():  # blank (what strip() would empty, without the copy)
            continue
        # the bracket count settles almost every line here, without the call
        if text.count("[") + text.count("{") > max_depth and nesting_too_deep(text, max_depth=max_depth):
            errors.add(number, None, too_deep_message(limits))
            continue
        try:
            yield number, _loads(text)
        except RecursionError:  # deeper than the interpreter allows: only if the cap is set above it
            errors.add(number, None, too_deep_message(limits))
        except ValueError as exc:
            errors.add(number, None, json_error_message(exc))


def csv_rows(
    file: IO[bytes], errors: ErrorLog, limits: Limits | None = None
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row as a dict keyed by the header) for every data row of a CSV with a header.

    A field longer than the line cap (a quoted field may span lines) stops the file with a located error.
    """
    limits = limits or Limits.from_settings()
    # csv's field limit is process-wide: set it to the cap while this file is read, then restore it
    previous = csv.field_size_limit(limits.max_line_bytes)
    try:
        yield from _csv_rows(file, errors, limits)
    finally:
        csv.field_size_limit(previous)


def _csv_rows(file: IO[bytes], errors: ErrorLog, limits: Limits) -> Iterator[tuple[int, dict[str, str]]]:
    lines = (text for _, text in text_lines(file, errors, limits))
    reader = csv.reader(lines)
    header: list[str] | None = None
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            message = str(exc)
            if "field larger than field limit" in message:
                message = (
                    f"a field is longer than {limits.max_line_bytes:,} characters "
                    "(SPECREVIEW_TRACE_MAX_LINE_BYTES)"
                )
            errors.add(reader.line_num or None, None, f"invalid CSV: {message}")
            return
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


class _ArrayText:
    """A JSON array file's text, decoded a chunk at a time: ``buf[pos:]`` is not read yet and ``line``
    is the 1-based line ``pos`` is on. Holds at most one element past a chunk, never the file."""

    def __init__(self, file: IO[bytes], errors: ErrorLog, limits: Limits):
        self.file, self.errors, self.limits = file, errors, limits
        self.decoder = json.JSONDecoder(parse_constant=_reject_constant)
        self.utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.pos = 0
        self.line = 1
        self.eof = False
        self.offset = 0  # bytes read from the file so far

    def more(self) -> bool:
        """Read the next chunk onto the unread text; False at the end of the file or a non-UTF-8 byte
        (reported, and the file ends there)."""
        if self.eof:
            return False
        chunk = self.file.read(READ_CHUNK)
        try:
            text = self.utf8.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            # exc.object is the decoder's pending bytes plus this chunk (empty at the end of the file)
            at = self.offset - (len(exc.object) - len(chunk)) + exc.start
            self.errors.add(
                self.line, None, f"not valid UTF-8: byte 0x{exc.object[exc.start]:02x} at byte {at}"
            )
            self.eof = True
            return False
        self.offset += len(chunk)
        if not chunk:
            self.eof = True
        self.buf = self.buf[self.pos :] + text
        self.pos = 0
        if self.buf.startswith("\ufeff") and self.offset == len(chunk):
            self.buf = self.buf[1:]
        return bool(text) or not self.eof

    def skip_ws(self) -> bool:
        """Move past blanks, counting lines; whether a character follows (at ``buf[pos]``)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                if self.buf[self.pos] == "\n":
                    self.line += 1
                self.pos += 1
            if self.pos < len(self.buf):
                return True
            if not self.more():
                return False

    def element(self) -> Any:
        """Decode the value at ``pos`` and move past it; ``_STOP`` when it is invalid, too long or
        too deep (reported at the line it starts on)."""
        limits, errors = self.limits, self.errors
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if len(self.buf) - self.pos > limits.max_line_bytes:
                    # invalid within the first max_line_bytes characters: say so, not "too long"
                    if exc.pos - self.pos < limits.max_line_bytes and "Unterminated" not in exc.msg:
                        errors.add(self.line, None, json_error_message(exc))
                        return _STOP
                    errors.add(self.line, None, element_too_long_message(limits))
                    return _STOP
                if not self.more():
                    errors.add(self.line, None, json_error_message(exc))
                    return _STOP
                continue
            except RecursionError:
                errors.add(self.line, None, too_deep_message(limits))
                return _STOP
            except ValueError as exc:
                errors.add(self.line, None, json_error_message(exc))
                return _STOP
            if end >= len(self.buf) and not self.eof and self.more():
                continue  # a number might continue in the next chunk
            break
        if end - self.pos > limits.max_line_bytes:
            errors.add(self.line, None, element_too_long_message(limits))
            return _STOP
        if nesting_too_deep(self.buf, max_depth=limits.max_depth, start=self.pos, end=end):
            errors.add(self.line, None, too_deep_message(limits))
            return _STOP
        self.line += self.buf.count("\n", self.pos, end)
        self.pos = end
        return value


_STOP = object()  # _ArrayText.element's "no element: the file stops here" (null is a value)


def json_array(file: IO[bytes], errors: ErrorLog, limits: Limits | None = None) -> Iterator[tuple[int, Any]]:
    """(line number where it starts, element) for each element of a top-level JSON array, incrementally.

    An element longer than ``limits.max_line_bytes`` characters or nested deeper than
    ``limits.max_depth`` stops the file with a located error (the array's own bracket not counted)."""
    limits = limits or Limits.from_settings()
    file.seek(0)
    text = _ArrayText(file, errors, limits)
    if not text.skip_ws() or text.buf[text.pos] != "[":
        if not errors:
            errors.add(text.line, None, "expected a JSON array ('[') at the start of the file")
        return
    text.pos += 1
    first = True
    while True:
        if not text.skip_ws():
            errors.add(text.line, None, "invalid JSON: the array is not closed (missing ']')")
            return
        if text.buf[text.pos] == "]":
            text.pos += 1
            if text.skip_ws():
                errors.add(text.line, None, "invalid JSON: extra data after the closing ']'")
            return
        if not first:
            if text.buf[text.pos] != ",":
                errors.add(
                    text.line, None, f"invalid JSON: expected ',' or ']' but found {text.buf[text.pos]!r}"
                )
                return
            text.pos += 1
            if not text.skip_ws():
                errors.add(text.line, None, "invalid JSON: the array is not closed (missing ']')")
                return
        first = False
        start_line = text.line
        value = text.element()
        if value is _STOP:
            return
        yield start_line, value
