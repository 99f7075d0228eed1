"""A compiler from the subset of JSON Schema 2020-12 that the trace schema uses to Python closures.

``jsonschema`` takes about 150 µs a line on the request schema (request.schema.json), which alone
would cap an import at 7,000 requests/s; the compiled checks take a few µs. The compiler supports
exactly the keywords the schema uses and refuses any other, so the file and the validator cannot
drift apart; tests check it agrees with ``jsonschema`` on generated inputs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

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


def json_type_of(value: Any) -> str:
    """The JSON type name of a decoded value (``integer``, ``object``), or its Python type's name."""
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


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


FieldPath = str | tuple  # a field path, or (parent path, key or list index) resolved only for an error


def _path(path: FieldPath) -> str:
    """The text of a field path (``messages[0].role``); the compiled checks build it only on error."""
    if isinstance(path, str):
        return path
    parent, key = path
    if type(key) is int:
        return f"{_path(parent)}[{key}]"
    return _child(_path(parent), key)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    return text if len(text) <= 60 else text[:57] + "..."


_TYPE_TESTS = {
    "string": "type({v}) is str",
    "integer": "(type({v}) is int or (type({v}) is float and {v}.is_integer()))",
    "number": "(type({v}) is int or type({v}) is float)",
    "object": "type({v}) is dict",
    "array": "type({v}) is list",
    "boolean": "type({v}) is bool",
    "null": "{v} is None",
}


class SchemaCompiler:
    """Compiles the subset of JSON Schema 2020-12 that the trace schema uses into Python source.

    Straight-line generated code (one function per ``$defs`` entry) runs about 20 times faster than
    ``jsonschema``; the error messages name the field path (``messages[0].role``) and the value.
    """

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
        self.consts: dict[str, Any] = {}
        self.functions: list[str] = []
        self.refs: dict[str, str] = {}
        self.counter = 0

    def compile(self) -> Check:
        entry = self._function(self.root, "_validate")
        namespace: dict[str, Any] = {
            "_path": _path,
            "_short": _short,
            "_type_of": json_type_of,
            "_equal": _equal,
            **self.consts,
        }
        exec("\n\n".join(self.functions), namespace)  # noqa: S102 - source generated from our own schema
        return namespace[entry]

    def source(self) -> str:
        self.compile()
        return "\n\n".join(self.functions)

    # --- helpers ---------------------------------------------------------------------------------
    def _name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _const(self, value: Any) -> str:
        name = self._name("_c")
        self.consts[name] = value
        return name

    def _function(self, schema: dict | bool, name: str) -> str:
        lines = [f"def {name}(v, path, errors):"]
        body = self._node(schema, "v", "path", 1)
        lines.extend(body or ["    pass"])
        self.functions.append("\n".join(lines))
        return name

    def _ref(self, ref: str) -> str:
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"only local $defs references are supported, not {ref!r}")
        key = ref.removeprefix("#/$defs/")
        if key not in self.refs:
            name = self._name("_def_")
            self.refs[key] = name
            self._function(self.root["$defs"][key], name)
        return self.refs[key]

    @staticmethod
    def _child_path(path: str, key: str) -> str:
        return f"({path}, {key!r})"  # resolved by _path only when an error is reported

    def _error(self, pad: str, path: str, message_expr: str) -> str:
        return f"{pad}errors.append((_path({path}), {message_expr}))"

    # --- the node compiler --------------------------------------------------------------------------
    def _node(self, schema: dict | bool, v: str, path: str, depth: int) -> list[str]:
        pad = "    " * depth
        if schema is True or schema == {}:
            return []
        if schema is False:
            return [self._error(pad, path, "'is not allowed here'")]
        assert isinstance(schema, dict)
        unknown = set(schema) - self.SUPPORTED - _ANNOTATIONS
        if unknown:
            raise ValueError(
                f"the trace schema uses keywords the validator does not support: {sorted(unknown)}"
            )
        out: list[str] = []
        if "$ref" in schema:
            out.append(f"{pad}{self._ref(schema['$ref'])}({v}, {path}, errors)")
        rest_depth = depth
        if "type" in schema:
            names = [schema["type"]] if isinstance(schema["type"], str) else list(schema["type"])
            for n in names:
                if n not in _TYPE_TESTS:
                    raise ValueError(f"unknown JSON Schema type {n!r}")
            test = " or ".join(_TYPE_TESTS[n].format(v=v) for n in names)
            wanted = " or ".join(_TYPE_NAMES[n] for n in names)
            out.append(f"{pad}if not ({test}):")
            out.append(
                self._error(
                    pad + "    ", path, f"{(f'must be {wanted}, got ')!r} + _type_of({v}) + ' ' + _short({v})"
                )
            )
            out.append(f"{pad}else:")
            rest_depth = depth + 1
        rest = self._keywords(schema, v, path, rest_depth)
        if "type" in schema:
            out.extend(rest or [f"{pad}    pass"])
        else:
            out.extend(rest)
        return out

    def _keywords(self, schema: dict, v: str, path: str, depth: int) -> list[str]:
        """The checks after ``type``, always in this order (the order errors are reported in)."""
        return [
            *self._value_keywords(schema, v, path, depth),
            *self._array_keywords(schema, v, path, depth),
            *self._object(schema, v, path, depth),
            *self._combinators(schema, v, path, depth),
        ]

    def _value_keywords(self, schema: dict, v: str, path: str, depth: int) -> list[str]:
        """enum, const, string lengths and pattern, numeric bounds."""
        pad = "    " * depth
        out: list[str] = []
        if "enum" in schema:
            options = schema["enum"]
            listed = ", ".join(_short(o) for o in options)
            if all(isinstance(o, str) for o in options):
                c = self._const(frozenset(options))
                out.append(f"{pad}if type({v}) is not str or {v} not in {c}:")
            else:
                c = self._const(options)
                out.append(f"{pad}if not any(_equal({v}, o) for o in {c}):")
            out.append(
                self._error(pad + "    ", path, f"{(f'must be one of {listed}, got ')!r} + _short({v})")
            )
        if "const" in schema:
            c = self._const(schema["const"])
            shown = _short(schema["const"])
            if isinstance(schema["const"], str):
                out.append(f"{pad}if type({v}) is not str or {v} != {c}:")
            else:
                out.append(f"{pad}if not _equal({v}, {c}):")
            out.append(self._error(pad + "    ", path, f"{(f'must be {shown}, got ')!r} + _short({v})"))
        if "minLength" in schema:
            low = schema["minLength"]
            message = "must not be empty" if low == 1 else f"must have >= {low} characters"
            out.append(f"{pad}if type({v}) is str and len({v}) < {low}:")
            out.append(self._error(pad + "    ", path, repr(message)))
        if "maxLength" in schema:
            high = schema["maxLength"]
            out.append(f"{pad}if type({v}) is str and len({v}) > {high}:")
            out.append(
                self._error(
                    pad + "    ", path, f"{(f'must have at most {high} characters, got ')!r} + str(len({v}))"
                )
            )
        if "pattern" in schema:
            c = self._const(re.compile(schema["pattern"]))
            out.append(f"{pad}if type({v}) is str and not {c}.search({v}):")
            prefix = f"must match {schema['pattern']}, got "
            out.append(self._error(pad + "    ", path, f"{prefix!r} + _short({v})"))
        for key, sign, op in (
            ("minimum", ">=", ">="),
            ("exclusiveMinimum", ">", ">"),
            ("maximum", "<=", "<="),
        ):
            if key in schema:
                bound = schema[key]
                out.append(f"{pad}if (type({v}) is int or type({v}) is float) and not {v} {op} {bound!r}:")
                out.append(
                    self._error(pad + "    ", path, f"{(f'must be {sign} {bound}, got ')!r} + _short({v})")
                )
        return out

    def _array_keywords(self, schema: dict, v: str, path: str, depth: int) -> list[str]:
        pad = "    " * depth
        out: list[str] = []
        if "minItems" in schema:
            low = schema["minItems"]
            plural = "s" if low != 1 else ""
            out.append(f"{pad}if type({v}) is list and len({v}) < {low}:")
            out.append(self._error(pad + "    ", path, repr(f"must have at least {low} item{plural}")))
        if "items" in schema:
            item = self._name("_i")
            index = self._name("_n")
            item_path = self._name("_p")
            body = self._node(schema["items"], item, item_path, depth + 2)
            if body:
                out.append(f"{pad}if type({v}) is list:")
                out.append(f"{pad}    for {index}, {item} in enumerate({v}):")
                out.append(f"{pad}        {item_path} = ({path}, {index})")
                out.extend(body)
        return out

    def _combinators(self, schema: dict, v: str, path: str, depth: int) -> list[str]:
        """oneOf, and if/then."""
        pad = "    " * depth
        out: list[str] = []
        if "oneOf" in schema:
            branches = schema["oneOf"]
            names = [self._function(b, self._name("_one_")) for b in branches]
            if all(isinstance(b, dict) and set(b) == {"required"} for b in branches):
                message = "needs exactly one of: " + ", ".join("+".join(b["required"]) for b in branches)
            else:
                message = f"must match exactly one of {len(branches)} alternatives"
            if all(isinstance(b, dict) and set(b) == {"required"} for b in branches):
                # required-only branches: count them inline (required ignores non-objects: all match)
                tests = " + ".join(
                    "(" + " and ".join(f"{k!r} in {v}" for k in b["required"]) + ")" for b in branches
                )
                count = f"(({tests}) if type({v}) is dict else {len(branches)})"
            else:
                self.consts["_ok"] = _branch_ok
                count = "sum((" + ", ".join(f"_ok({n}, {v}, {path})" for n in names) + ",))"
            out.append(f"{pad}if {count} != 1:")
            out.append(self._error(pad + "    ", path, repr(message)))
        if "if" in schema:
            cond = self._function(schema["if"], self._name("_if_"))
            self.consts["_ok"] = _branch_ok
            then = schema.get("then")
            if then is not None:
                then_name = self._function(then, self._name("_then_"))
                out.append(f"{pad}if _ok({cond}, {v}, {path}):")
                out.append(f"{pad}    {then_name}({v}, {path}, errors)")
        return out

    def _object(self, schema: dict, v: str, path: str, depth: int) -> list[str]:
        pad = "    " * depth
        required = schema.get("required", [])
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        if not (required or props or extra is not True):
            return []
        out = [f"{pad}if type({v}) is dict:"]
        for key in required:
            out.append(f"{pad}    if {key!r} not in {v}:")
            out.append(
                self._error(pad + "        ", self._child_path(path, key), "'required field is missing'")
            )
        if props or extra is not True:
            k = self._name("_k")
            value = self._name("_v")
            out.append(f"{pad}    for {k}, {value} in {v}.items():")
            first = True
            for key, sub in props.items():
                body = self._node(sub, value, self._child_path(path, key), depth + 3)
                out.append(f"{pad}        {'if' if first else 'elif'} {k} == {key!r}:")
                out.extend(body or [f"{pad}            pass"])
                first = False
            if extra is False or isinstance(extra, dict):
                out.append(f"{pad}        else:" if not first else f"{pad}        if True:")
                if extra is False:
                    out.append(
                        self._error(
                            pad + "            ",
                            f"({path}, {k})",
                            "'unknown field (put extra data in metadata)'",
                        )
                    )
                else:
                    body = self._node(extra, value, f"({path}, {k})", depth + 3)
                    out.extend(body or [f"{pad}            pass"])
            elif first:
                out.append(f"{pad}        pass")
        return out


def _branch_ok(function: Check, value: Any, path: str) -> bool:
    scratch: Errors = []
    function(value, path, scratch)
    return not scratch


def _equal(a: Any, b: Any) -> bool:
    # JSON equality: True is not 1
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b
