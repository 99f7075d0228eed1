"""Quality checks on one output: JSON / JSON-Schema validity and tool-call validity, the flags a
worker stores at write time, and ``output_valid``. The paired side (exact match against the
baseline, counts, rates, regressions) is :mod:`console.analysis.quality_pairs`.

Pure functions; no Django. Column contract as in ``console.analysis.metrics``.

Rules
-----
- **JSON** applies to requests whose ``response_format`` has type ``json_schema`` or
  ``json_object``. A Markdown fence wrapping the whole output (```` ```json ... ``` ```` or
  ```` ``` ... ``` ````, after stripping whitespace) is removed before parsing, because chat models
  often add one and clients routinely strip it; any other text around the JSON makes it invalid.
  ``json_schema``: schema-valid iff it validates against ``json_schema.schema``. ``json_object``:
  schema-valid iff the value is a JSON object.
- **Tool call** applies to requests with non-empty ``tools``. The output must parse as one or more
  calls: ``{"name": ..., "arguments": {...}}`` (arguments may also be a JSON-encoded string, as
  the OpenAI API sends them), ``{"type": "function", "function": {...}}``, ``{"tool_calls": [...]}``,
  a list of these, or one or more Qwen-style ``<tool_call>{...}</tool_call>`` blocks (text outside
  the blocks is allowed). Every call must name a defined tool (``tools`` entries in OpenAI form
  ``{"type": "function", "function": {"name", "parameters"}}`` or bare ``{"name", "parameters"}``)
  and its arguments must validate against that tool's ``parameters`` schema (none = any object).
- Checks are memoised per (output text, ``request_id``): a request's ``response_format`` and
  ``tools`` come from the trace and are the same in every arm.
- **Failed requests** fail every check that applies to them (the user got no valid output).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import jsonschema
import numpy as np
import pandas as pd

CHECKS: tuple[str, ...] = ("json_valid", "schema_valid", "tool_valid")

_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\n(?P<body>.*?)\n?```\Z", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(?P<body>.*?)</tool_call>", re.DOTALL)


def json_fence_strip(text: str) -> str:
    """Remove a Markdown code fence that wraps the whole (whitespace-stripped) text."""
    stripped = text.strip()
    match = _FENCE.match(stripped)
    return match.group("body").strip() if match else stripped


def json_parse(text: str | None) -> tuple[bool, Any]:
    """(parsed, value) for ``text`` after :func:`json_fence_strip`."""
    if not text:
        return False, None
    try:
        return True, json.loads(json_fence_strip(text))
    except (ValueError, RecursionError):
        return False, None


@lru_cache(maxsize=1024)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_validate(value: Any, schema: dict) -> tuple[bool, str | None]:
    """(valid, first error message) of ``value`` against a JSON Schema. Raises
    ``jsonschema.SchemaError`` when the schema itself is invalid."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    if validator.is_valid(value):
        return True, None
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    return False, None if error is None else error.message


def response_format_check(text: str | None, response_format: dict | None) -> dict[str, Any]:
    """JSON checks for one output. Returns ``{"json_valid", "schema_valid", "reason"}`` with
    ``None`` for checks that do not apply (no or non-JSON response_format, or an invalid schema:
    the trace's fault, not the output's; the reason says so)."""
    kind = (response_format or {}).get("type")
    if kind not in ("json_schema", "json_object"):
        return {"json_valid": None, "schema_valid": None, "reason": None}
    ok, value = json_parse(text)
    if not ok:
        return {"json_valid": False, "schema_valid": False, "reason": "output is not valid JSON"}
    if kind == "json_object":
        is_obj = isinstance(value, dict)
        return {"json_valid": True, "schema_valid": is_obj, "reason": None if is_obj else "not a JSON object"}
    schema = ((response_format or {}).get("json_schema") or {}).get("schema")
    if schema is None:
        return {"json_valid": True, "schema_valid": None, "reason": "response_format has no schema"}
    try:
        valid, message = schema_validate(value, schema)
    except jsonschema.SchemaError as exc:
        return {"json_valid": True, "schema_valid": None, "reason": f"invalid schema in trace: {exc.message}"}
    return {"json_valid": True, "schema_valid": valid, "reason": None if valid else f"schema: {message}"}


def _tool_specs(tools: Sequence[dict]) -> dict[str, dict]:
    specs = {}
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(fn, dict) and fn.get("name"):
            specs[fn["name"]] = fn.get("parameters") or {"type": "object"}
    return specs


def _calls_from_value(value: Any) -> list[Any] | None:
    if isinstance(value, list):
        calls: list[Any] = []
        for item in value:
            inner = _calls_from_value(item)
            if inner is None:
                return None
            calls.extend(inner)
        return calls
    if isinstance(value, dict):
        if isinstance(value.get("tool_calls"), list):
            return _calls_from_value(value["tool_calls"])
        if isinstance(value.get("function"), dict):
            return [value["function"]]
        if "name" in value:
            return [value]
    return None


def tool_calls_parse(text: str | None) -> list[dict] | None:
    """The tool calls in ``text`` (see module docstring), or None when it does not parse as any."""
    if not text:
        return None
    blocks = _TOOL_CALL.findall(text)
    if blocks:
        calls: list[Any] = []
        for block in blocks:
            ok, value = json_parse(block)
            inner = _calls_from_value(value) if ok else None
            if inner is None:
                return None
            calls.extend(inner)
        return calls
    ok, value = json_parse(text)
    return _calls_from_value(value) if ok else None


def tool_call_check(text: str | None, tools: Sequence[dict] | None) -> dict[str, Any]:
    """Tool-call validity of one output: ``{"tool_valid", "reason"}``; None when no tools."""
    if not tools:
        return {"tool_valid": None, "reason": None}
    calls = tool_calls_parse(text)
    if not calls:
        return {"tool_valid": False, "reason": "output is not a tool call"}
    specs = _tool_specs(tools)
    for call in calls:
        name = call.get("name") if isinstance(call, dict) else None
        if name not in specs:
            return {"tool_valid": False, "reason": f"unknown tool {name!r}"}
        args = call.get("arguments", call.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return {"tool_valid": False, "reason": f"arguments of {name!r} are not JSON"}
        if not isinstance(args, dict):
            return {"tool_valid": False, "reason": f"arguments of {name!r} are not an object"}
        try:
            valid, message = schema_validate(args, specs[name])
        except jsonschema.SchemaError as exc:
            return {"tool_valid": None, "reason": f"invalid parameters schema in trace: {exc.message}"}
        if not valid:
            return {"tool_valid": False, "reason": f"arguments of {name!r}: {message}"}
    return {"tool_valid": True, "reason": None}


def request_failed(requests: pd.DataFrame) -> np.ndarray:
    """Per row: the request failed (not ``completed``; or, before derivation, an error, no finish
    time or no finish reason)."""
    if "completed" in requests:
        return ~requests["completed"].to_numpy(dtype=bool)
    error = requests["error"].fillna("").astype(str).str.len().to_numpy() > 0
    return (
        error
        | ~np.isfinite(requests["finish_s"].to_numpy(dtype=float))
        | requests["finish_reason"].isna().to_numpy()
    )


# Flags a worker may have stored at write time, by check (``tool_call_valid`` is the model's name).
STORED_COLUMNS: dict[str, tuple[str, ...]] = {
    "json_valid": ("json_valid",),
    "schema_valid": ("schema_valid",),
    "tool_valid": ("tool_valid", "tool_call_valid"),
}


def _stored_flags(requests: pd.DataFrame) -> dict[str, np.ndarray] | None:
    found = {}
    for check, names in STORED_COLUMNS.items():
        name = next((c for c in names if c in requests), None)
        if name is None:
            return None
        found[check] = requests[name].astype("boolean").to_numpy(dtype=object, na_value=None)
    return found


def quality_flags(requests: pd.DataFrame, *, use_stored: bool = True) -> pd.DataFrame:
    """Validity per request (same index as ``requests``): ``json_valid``, ``schema_valid``,
    ``tool_valid`` (pandas nullable boolean, NA where the check does not apply), ``output_valid``
    (bool) and ``quality_reason`` (str or None, the first failing check's reason).

    When ``requests`` already carries the three flags (``STORED_COLUMNS``, as the worker stores
    them with each result) and ``use_stored`` is true, they are used as they are and only the
    failing rows are re-checked, for their reasons: validating every output again is the
    slowest part of a comparison. Failed requests fail their applicable checks either way.
    """
    failed = request_failed(requests)
    n = len(requests)
    texts = requests["output_text"].to_numpy()
    formats = requests["response_format"].to_numpy() if "response_format" in requests else np.full(n, None)
    tools = requests["tools"].to_numpy() if "tools" in requests else np.full(n, None)
    stored = _stored_flags(requests) if use_stored else None
    if stored is not None:
        return _flags_from_stored(
            stored, failed=failed, texts=texts, formats=formats, tools=tools, index=requests.index
        )
    results = {c: np.full(n, None, dtype=object) for c in CHECKS}
    reasons = np.full(n, None, dtype=object)
    # Arms often return the same text for the same request: check each (text, request) once.
    # A request's response_format and tools come from the trace, the same in every arm.
    ids = requests["request_id"].to_numpy() if "request_id" in requests else np.arange(n)
    cache: dict[tuple[str, object], dict[str, Any]] = {}
    for i in np.flatnonzero([bool(f) for f in formats]):
        key = (str(texts[i]), ids[i])
        if key not in cache:
            cache[key] = response_format_check(texts[i], formats[i])
        res = cache[key]
        if res["json_valid"] is not None and failed[i]:
            res = {"json_valid": False, "schema_valid": False, "reason": "request failed"}
        results["json_valid"][i] = res["json_valid"]
        results["schema_valid"][i] = res["schema_valid"]
        reasons[i] = res["reason"]
    tool_cache: dict[tuple[str, object], dict[str, Any]] = {}
    for i in np.flatnonzero([isinstance(t, list | tuple | np.ndarray) and len(t) > 0 for t in tools]):
        key = (str(texts[i]), ids[i])
        if key not in tool_cache:
            tool_cache[key] = tool_call_check(texts[i], list(tools[i]))
        res = tool_cache[key]
        if res["tool_valid"] is not None and failed[i]:
            res = {"tool_valid": False, "reason": "request failed"}
        results["tool_valid"][i] = res["tool_valid"]
        if reasons[i] is None:
            reasons[i] = res["reason"]
    return _flags_frame(results, reasons, requests.index)


def _flags_frame(results: dict[str, np.ndarray], reasons: np.ndarray, index: pd.Index) -> pd.DataFrame:
    out = pd.DataFrame({c: pd.array(results[c], dtype="boolean") for c in CHECKS}, index=index)
    out["output_valid"] = ~(out[list(CHECKS)] == False).any(axis=1).to_numpy()  # noqa: E712
    out["quality_reason"] = reasons
    return out


def _flags_from_stored(
    stored: dict[str, np.ndarray],
    *,
    failed: np.ndarray,
    texts: np.ndarray,
    formats: np.ndarray,
    tools: np.ndarray,
    index: pd.Index,
) -> pd.DataFrame:
    results = {c: stored[c].copy() for c in CHECKS}
    reasons = np.full(len(failed), None, dtype=object)
    for c in CHECKS:
        applies = np.array([v is not None for v in results[c]], dtype=bool)
        results[c][applies & failed] = False
    for i in np.flatnonzero(failed):
        if any(results[c][i] is False for c in CHECKS):
            reasons[i] = "request failed"
    for i in np.flatnonzero(~failed):
        if results["json_valid"][i] is False or results["schema_valid"][i] is False:
            reasons[i] = response_format_check(texts[i], formats[i])["reason"] or "stored flag: invalid"
        elif results["tool_valid"][i] is False:
            tl = tools[i]
            reasons[i] = (tool_call_check(texts[i], list(tl) if tl is not None else None)["reason"]) or (
                "stored flag: invalid"
            )
    return _flags_frame(results, reasons, index)
