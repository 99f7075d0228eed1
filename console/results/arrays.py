"""Per-request number arrays stored as packed little-endian bytes.

A result row carries a few short arrays (chunk times, tokens per chunk, token ids, drafted and
accepted per step). Stored as JSON, every comparison decoded them row by row (most of its cold
time). Stored as raw bytes of one fixed dtype per field, a whole experiment's column decodes in
one ``np.frombuffer`` over the joined bytes (:func:`unpack_many`), the same on Postgres (bytea)
and SQLite (BLOB). Reading one row through the ORM still gives a Python list.

Float arrays are float64 (exact round trip of any Python float, NaN and infinities included);
integer arrays are int32 (token ids, token and draft counts), checked on the way in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from django.core.exceptions import ValidationError
from django.db import models

DTYPES: dict[str, np.dtype] = {"float": np.dtype("<f8"), "int": np.dtype("<i4")}
_INT_MIN, _INT_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max


class ArrayPackError(ValueError):
    """A value that is not a flat sequence of numbers of the field's kind."""


def pack(value: Any, *, kind: str, what: str = "array") -> bytes:
    """A flat sequence of numbers (list, tuple or 1-d array) as little-endian bytes of ``kind``
    ("float": float64, "int": int32). ``None`` is the empty array. Raises ArrayPackError naming
    ``what`` for anything else (nested lists, strings, None inside, out-of-range integers)."""
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if len(raw) % DTYPES[kind].itemsize:
            raise ArrayPackError(f"{what}: {len(raw)} bytes is not a whole number of {kind} values")
        return raw
    if isinstance(value, str | dict) or not isinstance(value, Sequence | np.ndarray):
        raise ArrayPackError(f"{what}: expected a list of numbers, got {type(value).__name__}")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, OverflowError) as exc:  # ragged nesting, huge ints
        raise ArrayPackError(f"{what}: {exc}") from None
    allowed = "iu" if kind == "int" else "iuf"
    if arr.size and arr.dtype.kind not in allowed:
        expected = "whole numbers" if kind == "int" else "numbers"
        raise ArrayPackError(f"{what}: expected {expected} only, got {arr.dtype.kind!r} values")
    if kind == "int" and arr.size and (arr.min() < _INT_MIN or arr.max() > _INT_MAX):
        raise ArrayPackError(f"{what}: a value is outside the 32-bit range")
    if arr.ndim != 1:
        raise ArrayPackError(f"{what}: expected a flat list, got {arr.ndim} dimensions")
    return arr.astype(DTYPES[kind], copy=False).tobytes()


def unpack(raw: bytes | memoryview | None, *, kind: str) -> list:
    """The Python list :func:`pack` stored (floats or ints)."""
    if not raw:
        return []
    return np.frombuffer(raw, dtype=DTYPES[kind]).tolist()


def unpack_many(blobs: Iterable[bytes | memoryview | None], *, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Many stored arrays at once: (all values in row order, number of values per row), the
    shape the analysis metrics flatten list columns into. One join and one
    ``frombuffer``, no per-row decoding."""
    items = [b if b is not None else b"" for b in blobs]
    dtype = DTYPES[kind]
    lens = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    if (lens % dtype.itemsize).any():
        raise ArrayPackError(f"stored {kind} array with a partial value (corrupt row)")
    flat = np.frombuffer(b"".join(items), dtype=dtype).astype(np.float64 if kind == "float" else np.int64)
    return flat, lens // dtype.itemsize


class PackedArrayField(models.BinaryField):
    """A flat list of numbers stored as packed bytes (see the module docstring). Python side:
    a list of floats (``kind="float"``) or ints (``kind="int"``); the empty list by default."""

    description = "Packed array of numbers"

    def __init__(self, *args: Any, kind: str = "float", **kwargs: Any) -> None:
        if kind not in DTYPES:
            raise ValueError(f"PackedArrayField kind must be one of {sorted(DTYPES)}, not {kind!r}")
        self.kind = kind
        kwargs.setdefault("default", list)
        kwargs.setdefault("editable", False)
        super().__init__(*args, **kwargs)

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()
        kwargs["kind"] = self.kind
        if kwargs.get("default") is list:
            del kwargs["default"]
        if kwargs.get("editable") is False:
            del kwargs["editable"]
        return name, path, args, kwargs

    def get_default(self) -> list:
        return [] if self.default is list else super().get_default()

    def get_prep_value(self, value: Any) -> bytes:
        try:
            return pack(value, kind=self.kind, what=self.name or "array")
        except ArrayPackError as exc:
            raise ValidationError(str(exc)) from None

    def get_db_prep_value(self, value: Any, connection, prepared: bool = False):
        if not prepared:
            value = self.get_prep_value(value)
        return connection.Database.Binary(value)

    def from_db_value(self, value, expression, connection) -> list:
        return unpack(value, kind=self.kind)

    def to_python(self, value: Any) -> list:
        if isinstance(value, bytes | bytearray | memoryview):
            return unpack(value, kind=self.kind)
        if value is None:
            return []
        return list(value)

    def value_to_string(self, obj) -> str:
        import json

        return json.dumps(self.value_from_object(obj))
