"""Validation of one trace request.

The shape is defined by ``schema/request.schema.json`` (the file docs/trace-format.md documents).
``jsonschema`` takes about 150 µs a line on that schema, which alone would cap an import at 7,000
requests/s, so the schema is compiled here into plain Python closures (a few µs a line). The
compiler supports exactly the keywords the schema uses and refuses any other, so the file and the
validator cannot drift apart; tests check it agrees with ``jsonschema`` on generated inputs.

Checks a JSON Schema cannot express (finite numbers, the configurable ``max_tokens`` ceiling,
embedded schemas that must themselves be valid JSON Schema) follow in ``request_semantic_errors``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from functools import cache
from typing import Any

import jsonschema
from jsonschema.validators import validator_for

from console.traces.schema import request_schema

Errors = list[tuple[str, str]]  # (field path, message)
Check = Callable[[Any, str, Errors], None]

_ANNOTATIONS = {"$schema", "$id", "$comment", "title", "description", "examples", "default", "$defs"}
_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
    "object": "an object",
    "array": "an array",
}


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _matches_type(value: Any, name: str) -> bool:
    kind = type(value)
    if name == "string":
        return kind is str
    if name == "integer":
        return kind is int or (kind is float and value.is_integer())
    if name == "number":
        return kind is int or kind is float
    if name == "object":
        return kind is dict
    if name == "array":
        return kind is list
    if name == "boolean":
        return kind is bool
    if name == "null":
        return value is None
    raise ValueError(f"unknown JSON Schema type {name!r}")


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    return text if len(text) <= 60 else text[:57] + "..."


class SchemaCompiler:
    """Compiles the subset of JSON Schema 2020-12 that the trace schema uses into closures."""

    SUPPORTED = {
        "type",
        "enum",
        "const",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "minItems",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "pattern",
        "oneOf",
        "if",
        "then",
        "$ref",
    }

    def __init__(self, root: dict):
        self.root = root
        self._refs: dict[str, Check] = {}

    def compile(self) -> Check:
        return self._node(self.root)

    def _ref(self, ref: str) -> Check:
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"only local $defs references are supported, not {ref!r}")
        name = ref.removeprefix("#/$defs/")
        if name not in self._refs:
            target = self.root["$defs"][name]
            slot: list[Check] = []
            self._refs[name] = lambda v, p, e: slot[0](v, p, e)
            slot.append(self._node(target))
        return self._refs[name]

    def _node(self, schema: dict) -> Check:
        unknown = set(schema) - self.SUPPORTED - _ANNOTATIONS
        if unknown:
            raise ValueError(
                f"the trace schema uses keywords the validator does not support: {sorted(unknown)}"
            )
        checks: list[Check] = []
        if "$ref" in schema:
            checks.append(self._ref(schema["$ref"]))
        if "type" in schema:
            checks.append(self._type(schema["type"]))
        if "enum" in schema:
            checks.append(self._enum(schema["enum"]))
        if "const" in schema:
            checks.append(self._const(schema["const"]))
        checks.extend(self._string(schema))
        checks.extend(self._number(schema))
        checks.extend(self._array(schema))
        checks.extend(self._object(schema))
        if "oneOf" in schema:
            checks.append(self._one_of(schema["oneOf"]))
        if "if" in schema:
            checks.append(self._if_then(schema["if"], schema.get("then")))

        def check(value: Any, path: str, errors: Errors) -> None:
            before = len(errors)
            for c in checks:
                c(value, path, errors)
                # after a type error the other keywords would only repeat it
                if len(errors) > before and c is type_check:
                    return

        type_check = checks[0] if checks and "type" in schema and "$ref" not in schema else None
        if len(checks) == 1:
            return checks[0]
        return check

    def _type(self, spec: str | list[str]) -> Check:
        names = [spec] if isinstance(spec, str) else list(spec)
        for n in names:
            _matches_type(None, n)  # raises on an unknown name
        wanted = " or ".join(_TYPE_NAMES[n] for n in names)

        def check(value: Any, path: str, errors: Errors) -> None:
            for n in names:
                if _matches_type(value, n):
                    return
            errors.append((path, f"must be {wanted}, got {_type_of(value)} {_short(value)}"))

        return check

    def _enum(self, options: list) -> Check:
        listed = ", ".join(_short(o) for o in options)

        def check(value: Any, path: str, errors: Errors) -> None:
            if not any(_equal(value, o) for o in options):
                errors.append((path, f"must be one of {listed}, got {_short(value)}"))

        return check

    def _const(self, const: Any) -> Check:
        def check(value: Any, path: str, errors: Errors) -> None:
            if not _equal(value, const):
                errors.append((path, f"must be {_short(const)}, got {_short(value)}"))

        return check

    def _string(self, schema: dict) -> list[Check]:
        out: list[Check] = []
        if "minLength" in schema:
            low = schema["minLength"]

            def min_length(value: Any, path: str, errors: Errors) -> None:
                if type(value) is str and len(value) < low:
                    errors.append(
                        (path, "must not be empty" if low == 1 else f"must have >= {low} characters")
                    )

            out.append(min_length)
        if "maxLength" in schema:
            high = schema["maxLength"]

            def max_length(value: Any, path: str, errors: Errors) -> None:
                if type(value) is str and len(value) > high:
                    errors.append((path, f"must have at most {high} characters, got {len(value)}"))

            out.append(max_length)
        if "pattern" in schema:
            regex = re.compile(schema["pattern"])

            def pattern(value: Any, path: str, errors: Errors) -> None:
                if type(value) is str and not regex.search(value):
                    errors.append((path, f"must match {regex.pattern}, got {_short(value)}"))

            out.append(pattern)
        return out

    def _number(self, schema: dict) -> list[Check]:
        out: list[Check] = []
        bounds = [
            ("minimum", lambda v, b: v >= b, ">="),
            ("exclusiveMinimum", lambda v, b: v > b, ">"),
            ("maximum", lambda v, b: v <= b, "<="),
        ]
        for key, ok, sign in bounds:
            if key in schema:
                out.append(self._bound(schema[key], ok, sign))
        return out

    @staticmethod
    def _bound(bound: float, ok: Callable[[float, float], bool], sign: str) -> Check:
        def check(value: Any, path: str, errors: Errors) -> None:
            kind = type(value)
            if (kind is int or kind is float) and not ok(value, bound):
                errors.append((path, f"must be {sign} {bound}, got {_short(value)}"))

        return check

    def _array(self, schema: dict) -> list[Check]:
        out: list[Check] = []
        if "minItems" in schema:
            low = schema["minItems"]

            def min_items(value: Any, path: str, errors: Errors) -> None:
                if type(value) is list and len(value) < low:
                    errors.append((path, f"must have at least {low} item{'s' if low != 1 else ''}"))

            out.append(min_items)
        if "items" in schema:
            item = self._node(schema["items"])

            def items(value: Any, path: str, errors: Errors) -> None:
                if type(value) is list:
                    for i, v in enumerate(value):
                        item(v, f"{path}[{i}]", errors)

            out.append(items)
        return out

    def _object(self, schema: dict) -> list[Check]:
        out: list[Check] = []
        required = schema.get("required", [])
        props = {k: self._node(v) for k, v in schema.get("properties", {}).items()}
        extra = schema.get("additionalProperties", True)
        extra_check = self._node(extra) if isinstance(extra, dict) else None
        if not (required or props or extra is not True):
            return out

        def check(value: Any, path: str, errors: Errors) -> None:
            if type(value) is not dict:
                return
            for key in required:
                if key not in value:
                    errors.append((_child(path, key), "required field is missing"))
            for key, v in value.items():
                sub = props.get(key)
                if sub is not None:
                    sub(v, _child(path, key), errors)
                elif extra is False:
                    errors.append((_child(path, key), "unknown field (put extra data in metadata)"))
                elif extra_check is not None:
                    extra_check(v, _child(path, key), errors)

        out.append(check)
        return out

    def _one_of(self, branches: list[dict]) -> Check:
        compiled = [self._node(b) for b in branches]
        if all(set(b) == {"required"} for b in branches):
            names = ", ".join("+".join(b["required"]) for b in branches)
            message = f"needs exactly one of: {names}"
        else:
            message = f"must match exactly one of {len(branches)} alternatives"

        def check(value: Any, path: str, errors: Errors) -> None:
            matched = 0
            for c in compiled:
                scratch: Errors = []
                c(value, path, scratch)
                matched += not scratch
            if matched != 1:
                errors.append((path, message))

        return check

    def _if_then(self, cond: dict, then: dict | None) -> Check:
        test = self._node(cond)
        then_check = self._node(then) if then is not None else None

        def check(value: Any, path: str, errors: Errors) -> None:
            scratch: Errors = []
            test(value, path, scratch)
            if not scratch and then_check is not None:
                then_check(value, path, errors)

        return check


def _equal(a: Any, b: Any) -> bool:
    # JSON equality: True is not 1
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


@cache
def request_validator() -> Check:
    """The compiled native request schema (compiled once per process)."""
    return SchemaCompiler(request_schema()).compile()


def request_schema_errors(record: Any) -> Errors:
    """Schema errors for one decoded native line, as (field path, message), in document order."""
    errors: Errors = []
    request_validator()(record, "", errors)
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
        return f"must be a JSON Schema object, got {_type_of(schema)}"
    return _embedded_schema_problem(json.dumps(schema, sort_keys=True))


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def request_semantic_errors(record: dict, *, max_tokens_ceiling: int) -> Errors:
    """Checks beyond the schema, for a record that passed it."""
    errors: Errors = []
    for key in ("arrival_s", "temperature", "top_p"):
        if not _finite(record.get(key)):
            errors.append((key, f"must be a finite number, got {record[key]}"))
    max_tokens = record.get("max_tokens")
    if isinstance(max_tokens, int | float) and max_tokens > max_tokens_ceiling:
        errors.append(("max_tokens", f"must be at most {max_tokens_ceiling} (the ceiling), got {max_tokens}"))
    response_format = record.get("response_format")
    if isinstance(response_format, dict) and isinstance(response_format.get("json_schema"), dict):
        if "schema" in response_format["json_schema"]:
            problem = embedded_schema_problem(response_format["json_schema"]["schema"])
            if problem:
                errors.append(("response_format.json_schema.schema", problem))
    for i, tool in enumerate(record.get("tools") or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and "parameters" in function:
            problem = embedded_schema_problem(function["parameters"])
            if problem:
                errors.append((f"tools[{i}].function.parameters", problem))
    return errors
