"""JSON helpers shared by every app: one definition of "JSON-safe" and of canonical JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd


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
    if value is pd.NA or value is pd.NaT:
        return None
    if hasattr(value, "item") and not isinstance(value, str | bytes):  # other numpy scalars (datetime64)
        return json_safe(value.item())
    return value


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, NaN refused: the form that is hashed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


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
