"""A run's result rows as one binary value, so a comparison loads one value per run instead of
one database row per request.

The worker packs a run's rows once, right after storing them (``RunResultsPack``); the rows stay
the source of truth. A pack is plain data, never pickle: a JSON header, then each column's
bytes. Numeric columns are little-endian numpy buffers; the per-request arrays are one flat
buffer with each row's length; every other column (text, JSON values, nullable flags) is one
JSON list. :func:`frame_unpack` returns the frame :func:`frame_pack` was given, column for
column: the same values, dtypes and order, and each array cell a read-only numpy view.

Pure numpy/pandas; no Django.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping

import numpy as np
import pandas as pd

MAGIC = b"specreview-frame-pack\n"
FORMAT = 1
_HEADER_LEN = struct.Struct("<Q")
_NUMERIC = {"f": "<f8", "i": "<i8", "u": "<i8", "b": "|b1"}
# stored dtype, dtype in the frame (ints stored as 32-bit, as the result rows store them)
_ARRAY_DTYPES = {"float": ("<f8", "float64"), "int": ("<i4", "int64")}


class FramePackError(ValueError):
    """A value that is not a frame pack of this format (truncated, corrupt or of another kind)."""


def frame_pack(frame: pd.DataFrame, *, arrays: Mapping[str, str]) -> bytes:
    """``frame`` as bytes. ``arrays`` names the columns whose cells are flat number arrays and
    their kind (``"float"`` or ``"int"``); other object columns must hold JSON values."""
    columns: list[dict[str, object]] = []
    chunks: list[bytes] = []
    offset = 0

    def add(raw: bytes) -> dict[str, int]:
        nonlocal offset
        chunks.append(raw)
        at = {"offset": offset, "nbytes": len(raw)}
        offset += len(raw)
        return at

    for name in frame.columns:
        series = frame[name]
        if name in arrays:
            stored, loaded = _ARRAY_DTYPES[arrays[name]]
            cells = [np.asarray(v if v is not None else (), dtype=loaded).ravel() for v in series]
            lens = np.fromiter(map(len, cells), dtype="<i8", count=len(cells))
            flat = np.concatenate(cells) if cells else np.empty(0, dtype=loaded)
            packed = flat.astype(stored)
            if not np.array_equal(packed, flat, equal_nan=True):
                raise FramePackError(f"column {name!r}: a value does not fit {stored}")
            columns.append(
                {
                    "name": name,
                    "kind": "array",
                    "dtype": stored,
                    "as": loaded,
                    "values": add(packed.tobytes()),
                    "lens": add(lens.tobytes()),
                }
            )
        elif series.dtype.kind in _NUMERIC:
            dtype = _NUMERIC[series.dtype.kind]
            raw = series.to_numpy().astype(dtype, copy=False).tobytes()
            columns.append({"name": name, "kind": "numeric", "dtype": dtype, "values": add(raw)})
        else:
            raw = json.dumps(series.tolist(), ensure_ascii=False, separators=(",", ":")).encode()
            columns.append({"name": name, "kind": "json", "values": add(raw)})
    header = json.dumps({"format": FORMAT, "n_rows": len(frame), "columns": columns}).encode()
    return b"".join([MAGIC, _HEADER_LEN.pack(len(header)), header, *chunks])


def _header(blob: bytes | memoryview) -> tuple[dict, memoryview]:
    view = memoryview(blob)
    start = len(MAGIC) + _HEADER_LEN.size
    if len(view) < start or bytes(view[: len(MAGIC)]) != MAGIC:
        raise FramePackError("not a frame pack")
    (size,) = _HEADER_LEN.unpack(view[len(MAGIC) : start])
    if len(view) < start + size:
        raise FramePackError("frame pack truncated in its header")
    try:
        header = json.loads(bytes(view[start : start + size]))
    except ValueError as exc:
        raise FramePackError(f"frame pack header unreadable: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise FramePackError(
            f"frame pack of format {header.get('format') if isinstance(header, dict) else '?'}, not {FORMAT}"
        )
    return header, view[start + size :]


def frame_unpack(blob: bytes | memoryview) -> pd.DataFrame:
    """The frame :func:`frame_pack` stored. Raises FramePackError when ``blob`` is not one."""
    header, body = _header(blob)
    n_rows = int(header["n_rows"])

    def section(at: Mapping[str, int]) -> memoryview:
        start, size = int(at["offset"]), int(at["nbytes"])
        if start < 0 or size < 0 or start + size > len(body):
            raise FramePackError("frame pack truncated in its data")
        return body[start : start + size]

    allowed = {*_NUMERIC.values(), *(d for pair in _ARRAY_DTYPES.values() for d in pair)}
    data: dict[str, object] = {}
    try:
        for col in header["columns"]:
            name, kind = col["name"], col["kind"]
            if {col.get("dtype", "<f8"), col.get("as", "<f8")} - allowed:
                raise FramePackError(f"frame pack column {name!r} of an unknown number type")
            if kind == "numeric":
                data[name] = np.frombuffer(section(col["values"]), dtype=col["dtype"]).copy()
            elif kind == "array":
                flat = np.frombuffer(section(col["values"]), dtype=col["dtype"]).astype(col["as"])
                flat.flags.writeable = False
                lens = np.frombuffer(section(col["lens"]), dtype="<i8")
                ends = np.cumsum(lens)
                if lens.size != n_rows or (lens < 0).any() or (ends[-1] if ends.size else 0) != flat.size:
                    raise FramePackError(f"frame pack column {name!r}: lengths do not match its values")
                bounds = zip([0, *ends[:-1].tolist()], ends.tolist(), strict=True)
                data[name] = np.fromiter((flat[a:b] for a, b in bounds), dtype=object, count=n_rows)
            elif kind == "json":
                values = json.loads(bytes(section(col["values"])))
                if not isinstance(values, list):
                    raise FramePackError(f"frame pack column {name!r} is not a list")
                data[name] = np.fromiter(values, dtype=object, count=len(values))
            else:
                raise FramePackError(f"frame pack column {name!r} of unknown kind {kind!r}")
            if len(data[name]) != n_rows:  # type: ignore[arg-type]
                raise FramePackError(f"frame pack column {name!r}: {len(data[name])} values, not {n_rows}")  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, FramePackError):
            raise
        raise FramePackError(f"frame pack unreadable: {exc}") from None
    return pd.DataFrame(data, index=pd.RangeIndex(n_rows))


def frames_concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Frames with the same columns, one after the other, column by column (``pd.concat``
    checks every cell of an all-None object column, which cost more than the rest of a load)."""
    if len(frames) == 1:
        return frames[0]
    return pd.DataFrame(
        {c: np.concatenate([f[c].to_numpy() for f in frames]) for c in frames[0].columns},
        index=pd.RangeIndex(sum(len(f) for f in frames)),
    )
