"""JSON helpers shared by every app: one definition of "JSON-safe" and of canonical JSON."""

from __future__ import annotations

import json
import json.encoder
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


def json_safe(value: Any) -> Any:
    """NaN/inf (not valid JSON) to None, numpy scalars and arrays to Python values, tuples to
    lists, recursively; mapping keys to str. The one definition every app stores JSON columns with."""
    kind = type(value)  # exact types first: the common case, without the ABC checks below
    if kind is str or kind is int or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is dict:
        return {k if type(k) is str else str(k): json_safe(v) for k, v in value.items()}
    if kind is list:
        return [json_safe(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, np.str_):
        return str(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    # seam: pandas is heavy (about 65 MiB); a trace import, which only needs canonical_json, never
    # loads it. Only values of no plain or numpy type get here, and a pd.NA comes with pandas loaded.
    import pandas as pd

    if value is pd.NA or value is pd.NaT:
        return None
    if hasattr(value, "item") and not isinstance(value, str | bytes):  # other numpy scalars (datetime64)
        return json_safe(value.item())
    return value


def _canonical_encoder(*, ensure_ascii: bool, allow_nan: bool) -> Callable[[Any, int], Sequence[str]]:
    """The C encoder ``json.dumps(value, sort_keys=True, separators=(",", ":"), ...)`` builds on every
    call (about half its cost on a small value), built once: it gives the text in chunks, with the
    bytes and errors of ``json.dumps``, but keeps no circular-reference bookkeeping (a JSON value
    cannot be circular; a cycle raises RecursionError, as nesting too deep does)."""
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None:  # no C accelerator (PyPy, some builds): json.dumps itself, in one chunk
        options: dict[str, Any] = {"sort_keys": True, "separators": (",", ":")}
        options.update(ensure_ascii=ensure_ascii, allow_nan=allow_nan)
        return lambda value, _level: (json.dumps(value, **options),)
    encode_str = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    not_json = json.JSONEncoder().default  # raises TypeError, as json.dumps does
    return make(None, not_json, encode_str, None, ":", ",", True, False, allow_nan)


_CANONICAL = {
    (ensure_ascii, allow_nan): _canonical_encoder(ensure_ascii=ensure_ascii, allow_nan=allow_nan)
    for ensure_ascii in (False, True)
    for allow_nan in (False, True)
}
_STORED = _CANONICAL[False, False]


def canonical_json(value: Any, *, ensure_ascii: bool = False, allow_nan: bool = False) -> str:
    """Sorted keys, no whitespace: the form that is hashed and compared.

    The default (non-ASCII written as is, NaN and infinities refused with ValueError) is what is
    stored and hashed: config hashes, router documents, decision bundles, trace requests.
    ``ensure_ascii`` writes non-ASCII as ``\\u`` escapes and ``allow_nan`` writes ``NaN`` and
    ``Infinity`` (not JSON); both together are ``json.dumps``'s own defaults, the bytes of grading's
    in-memory keys. A value that is not JSON (a set, an object) raises TypeError."""
    if not (ensure_ascii or allow_nan):
        return "".join(_STORED(value, 0))  # the stored form, a few times per imported request
    return "".join(_CANONICAL[ensure_ascii, allow_nan](value, 0))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (RFC 8259): send a finite number, or null")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is beyond the range of a double")
    return value


def strict_loads(text: str | bytes) -> Any:
    """``json.loads`` as RFC 8259 has JSON: ``NaN``, ``Infinity`` and numbers that overflow a
    double (``1e999``) raise ValueError, where Python's parser would hand back non-finite floats
    that no statistic, bound or jsonb column can use."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
