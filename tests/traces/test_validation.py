"""The compiled validator is the schema file: it agrees with jsonschema and refuses keywords it lacks."""

from __future__ import annotations

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.traces.schema import request_schema
from console.traces.schema.compiler import SchemaCompiler
from console.traces.validation import embedded_schema_problem, request_schema_errors

REFERENCE = jsonschema.Draft202012Validator(request_schema())

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=40000),
    st.floats(min_value=-2, max_value=3, allow_nan=False),
    st.sampled_from(
        ["", "x", "r1", "interactive", "batch", "urgent", "function", "json_schema", "user", "bad name!"]
    ),
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "robot"])},
        optional={"content": st.one_of(st.text(max_size=5), st.none())},
    ),
    max_size=2,
)
tools = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["function", "retrieval"]),
            "function": st.fixed_dictionaries(
                {},
                optional={
                    "name": st.sampled_from(["get_x", "bad name!", ""]),
                    "parameters": st.just({"type": "object"}),
                },
            ),
            "extra": scalars,
        },
    ),
    max_size=2,
)
response_formats = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["text", "json_schema", "xml"]),
        "json_schema": st.fixed_dictionaries(
            {}, optional={"name": st.sampled_from(["a", "b c"]), "schema": st.just({})}
        ),
    },
)
records = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(scalars, st.just("req-1")),
        "arrival_s": scalars,
        "prompt": st.one_of(st.text(max_size=5), scalars),
        "messages": st.one_of(messages, scalars),
        "max_tokens": scalars,
        "temperature": scalars,
        "top_p": scalars,
        "class": scalars,
        "task": scalars,
        "tools": st.one_of(tools, scalars),
        "response_format": st.one_of(response_formats, scalars),
        "metadata": st.one_of(st.just({"a": 1}), scalars),
        "max_token": scalars,
    },
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records)
def test_it_agrees_with_jsonschema_on_generated_records(record):
    assert (not request_schema_errors(record)) == REFERENCE.is_valid(record)


def test_it_accepts_a_full_native_line():
    line = {
        "id": "r1",
        "arrival_s": 0.25,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 64,
        "temperature": 0.0,
        "top_p": 1,
        "seed": 7,
        "task": "json",
        "class": "batch",
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object"}},
        },
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "metadata": {"tenant": "a"},
    }
    assert request_schema_errors(line) == []
    assert REFERENCE.is_valid(line)


def test_it_refuses_a_schema_keyword_it_cannot_check():
    with pytest.raises(ValueError, match="does not support"):
        SchemaCompiler({"type": "object", "patternProperties": {}}).compile()


def test_it_checks_embedded_schemas_against_their_own_draft():
    assert embedded_schema_problem({"type": "object"}) is None
    assert embedded_schema_problem({"$schema": "http://json-schema.org/draft-04/schema#", "type": "objekt"})
    assert "JSON Schema object" in embedded_schema_problem("not a schema")
