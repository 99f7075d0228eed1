"""JSON helpers shared by every app: one definition of "JSON-safe" and of canonical JSON."""

from __future__ import annotations

import json
import json.encoder
import math
import sys
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


# Levels of nesting a free-form JSON value typed by a user may have (an engine's arguments, a
# policy, gate settings, a revert config: a few levels in practice). The limit sits far below what
# breaks the tools the value passes through later (pydantic serialises about 255 levels, Python's
# json about 1,000), so a value accepted here is never a 500 further on.
JSON_MAX_DEPTH = 64


class JsonTooDeep(ValueError):
    """A JSON value nested deeper than allowed; ``path`` is where (keys and indexes from the top,
    as far as known: empty when the parser itself gave up)."""

    def __init__(self, limit: int, path: tuple[str, ...] = ()):
        self.limit = limit
        self.path = path
        where = f" (at {'.'.join(path[:8])}{'...' if len(path) > 8 else ''})" if path else ""
        super().__init__(f"nested deeper than {limit} levels{where}")


def json_depth_check(value: Any, *, max_depth: int = JSON_MAX_DEPTH) -> None:
    """Raise :class:`JsonTooDeep` when ``value`` nests objects and arrays more than ``max_depth``
    levels (a scalar is level 0, ``{}`` and ``[]`` level 1). Iterative: any depth is safe to ask."""
    # Each entry: (value, its depth, its path as a linked pair (key, parent's pair) or None):
    # O(1) per value; the path is spelled out only for the error.
    stack: list[tuple[Any, int, Any]] = [(value, 0, None)]
    while stack:
        item, depth, link = stack.pop()
        if isinstance(item, dict):
            children: Any = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            continue
        if depth >= max_depth:
            path: list[str] = []
            while link is not None:
                key, link = link
                path.append(str(key))
            raise JsonTooDeep(max_depth, tuple(reversed(path)))
        stack.extend((child, depth + 1, (key, link)) for key, child in children)


def strict_loads(text: str | bytes, *, max_depth: int | None = JSON_MAX_DEPTH) -> Any:
    """``json.loads`` as RFC 8259 has JSON: ``NaN``, ``Infinity`` and numbers that overflow a
    double (``1e999``) raise ValueError, where Python's parser would hand back non-finite floats
    that no statistic, bound or jsonb column can use. Nesting deeper than ``max_depth`` levels
    raises :class:`JsonTooDeep` (a ValueError) naming where; None: no limit but the parser's own,
    which is also a :class:`JsonTooDeep`. The one check every JSON field of a form or an API body
    passes (``console.api`` reads bodies with it)."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:  # thousands of levels: the parser's stack, before any limit here
        raise JsonTooDeep(max_depth or sys.getrecursionlimit()) from None
    if max_depth is not None:
        json_depth_check(value, max_depth=max_depth)
    return value
