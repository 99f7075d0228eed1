"""Validation of one trace request.

The shape is defined by ``schema/request.schema.json`` (the file docs/trace-format.md documents),
compiled once into plain Python closures (schema/compiler.py: ``jsonschema`` itself would cap an
import at 7,000 requests/s).

Checks a JSON Schema cannot express (finite numbers, the configurable ``max_tokens`` ceiling,
embedded schemas that must themselves be valid JSON Schema) follow in ``request_semantic_errors``.
"""

from __future__ import annotations

import json
import math
from functools import cache
from typing import Any

import jsonschema
from jsonschema.validators import validator_for

from console.traces.schema import request_schema
from console.traces.schema.compiler import Check, Errors, SchemaCompiler, json_type_of


@cache
def _request_validator() -> Check:
    """The compiled native request schema (compiled once per process)."""
    return SchemaCompiler(request_schema()).compile()


def request_schema_errors(record: Any) -> Errors:
    """Schema errors for one decoded native line, as (field path, message), in document order: the
    check every imported request passes first (then ``request_semantic_errors``)."""
    errors: Errors = []
    _request_validator()(record, "", errors)
    return errors


@cache
def _embedded_schema_problem(schema_json: str) -> str | None:
    schema = json.loads(schema_json)
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        return f"is not a valid JSON Schema: {exc.message}" + (f" (at {where})" if where else "")
    return None


def embedded_schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a valid JSON Schema (checked against its own $schema draft), or None.

    Results are cached by the schema's canonical JSON: traces repeat a few schemas many times.
    """
    if not isinstance(schema, dict | bool):
        return f"must be a JSON Schema object, got {json_type_of(schema)}"
    return _embedded_schema_problem(json.dumps(schema, sort_keys=True))


@cache
def request_id_max_chars() -> int:
    """Characters a request id may have once written as text (the schema's maxLength; the column's)."""
    return int(request_schema()["properties"]["id"]["maxLength"])


def _session_errors(record: dict) -> Errors:
    """A first turn needs an arrival; a later turn needs a session and is timed by its think time."""
    turn = record.get("turn", 0)
    if not turn:
        if "arrival_s" not in record:
            return [("arrival_s", "is required for a request that is the first turn (turn 0) of its session")]
        if "think_time_s" in record:
            return [("think_time_s", "is for later turns only: the first turn (turn 0) arrives at arrival_s")]
        return []
    if "session_id" not in record:
        return [("session_id", f"is required for a later turn (turn {turn}): which session is it a turn of?")]
    return []


_FINITE_KEYS = ("arrival_s", "temperature", "top_p", "think_time_s")


def request_semantic_errors(record: dict, *, max_tokens_ceiling: int) -> Errors:
    """Checks beyond the schema, for a record that passed it."""
    errors: Errors = []
    request_id = record.get("id")
    if not isinstance(request_id, str) and len(str(request_id)) > request_id_max_chars():
        # maxLength binds strings only: a 300-digit integer id is just as long once stored as text
        errors.append(
            ("id", f"must have at most {request_id_max_chars()} characters, got {len(str(request_id))}")
        )
    get = record.get
    for key in _FINITE_KEYS:
        value = get(key)
        if isinstance(value, float) and not math.isfinite(value):
            errors.append((key, f"must be a finite number, got {record[key]}"))
    errors.extend(_session_errors(record))
    max_tokens = get("max_tokens")
    if isinstance(max_tokens, int | float) and max_tokens > max_tokens_ceiling:
        errors.append(("max_tokens", f"must be at most {max_tokens_ceiling} (the ceiling), got {max_tokens}"))
    response_format = get("response_format")
    if isinstance(response_format, dict) and isinstance(response_format.get("json_schema"), dict):
        if "schema" in response_format["json_schema"]:
            problem = embedded_schema_problem(response_format["json_schema"]["schema"])
            if problem:
                errors.append(("response_format.json_schema.schema", problem))
    tools = get("tools")
    if tools:
        for i, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict) and "parameters" in function:
                problem = embedded_schema_problem(function["parameters"])
                if problem:
                    errors.append((f"tools[{i}].function.parameters", problem))
    return errors
