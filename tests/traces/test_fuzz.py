"""Every trace parser under arbitrary bytes and arbitrary JSON: the import either stores a whole trace or
raises a located ``TraceImportError`` and stores nothing; it never crashes and never keeps half a trace.

Sized for a 2-core machine (100 examples a case, about two minutes in all); hunt harder with
``SPECREVIEW_FUZZ_EXAMPLES=2000``.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from console.traces.errors import TraceImportError
from console.traces.models import Trace, TraceRequest
from console.traces.parsers import PARSERS, TIMING
from console.traces.parsers.mapped import field_mapping_parse
from console.traces.services import trace_import

pytestmark = pytest.mark.django_db

POOL = "tests/traces/fixtures/openai_requests.jsonl"
FUZZ = settings(
    max_examples=int(os.environ.get("SPECREVIEW_FUZZ_EXAMPLES", "100")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# --- documents --------------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
roles = st.sampled_from(["system", "user", "assistant", "tool", "human", "gpt"]) | st.text(max_size=6)
messages = st.lists(
    st.fixed_dictionaries({"role": roles}, optional={"content": st.text(max_size=30) | json_values}),
    max_size=3,
)


def _deep_value(n: int) -> object:
    value: object = []
    for _ in range(n - 1):
        value = [value]
    return value


deep = st.integers(min_value=1, max_value=300).map(_deep_value)  # json.dumps recurses: 300 levels is enough
values = json_values | messages | deep

# keys each parser looks at; documents mix them with arbitrary values and arbitrary extra keys
KEYS = {
    "native": ["id", "arrival_s", "prompt", "messages", "max_tokens", "temperature", "top_p", "seed", "task"]
    + ["class", "response_format", "tools", "metadata"],
    "openai_log": ["timestamp", "created", "body", "request", "messages", "prompt", "model", "custom_id"]
    + ["max_tokens", "metadata", "functions", "tools", "url", "service_tier", "seed", "task"],
    "mooncake": ["timestamp", "input_length", "output_length", "hash_ids"],
    "mtbench": ["question_id", "category", "turns"],
    "sharegpt": ["id", "conversations"],
    "humaneval": ["task_id", "prompt", "entry_point", "test"],
    "bfcl": ["id", "question", "function"],
    "gsm8k": ["id", "question", "answer"],
    "jsonschema": ["id", "schema", "subset", "source_path"],
}
PLAUSIBLE = {
    "arrival_s": st.floats(min_value=0, max_value=1e6) | st.integers(min_value=0, max_value=10**6),
    "timestamp": st.floats(min_value=-1e20, max_value=1e20) | st.integers() | st.text(max_size=30),
    "max_tokens": st.integers(min_value=-3, max_value=70000),
    "input_length": st.integers(min_value=-3, max_value=10**6),
    "output_length": st.integers(min_value=-3, max_value=10**6),
    "seed": st.integers() | st.floats(),
    "turns": st.lists(st.text(max_size=20), max_size=3),
    "conversations": st.lists(
        st.fixed_dictionaries({"from": roles, "value": st.text(max_size=20) | json_values}), max_size=3
    ),
    "question": st.lists(messages, max_size=2) | st.text(max_size=20),
    "function": st.lists(
        st.fixed_dictionaries({"name": st.text(max_size=70)}, optional={"parameters": json_values}),
        max_size=2,
    ),
    "schema": st.dictionaries(st.sampled_from(["type", "properties", "items", "$ref"]), json_values),
    "prompt": st.text(max_size=40),
    "id": st.text(max_size=210) | st.integers(),
}


def _object(fmt: str) -> st.SearchStrategy[dict]:
    known = {k: PLAUSIBLE.get(k, values) | values for k in KEYS[fmt]}
    return st.builds(
        lambda a, b: a | b,
        st.fixed_dictionaries({}, optional=known),
        st.dictionaries(st.text(max_size=8), values, max_size=2),
    )


# Near-valid documents: a valid item per format, with at most one field replaced by a wild value, so
# the fuzz reaches the success path and the edges next to it, not only the first type check.
AUTO = "__auto__"
words = st.text(min_size=1, max_size=40).filter(str.strip)
valid_message = st.fixed_dictionaries({"role": st.sampled_from(["system", "user"]), "content": words})
ID_KEYS = {"native": "id", "openai_log": "custom_id", "mtbench": "question_id", "humaneval": "task_id"}
BASES = {
    "native": st.fixed_dictionaries(
        {
            "id": st.just(AUTO),
            "arrival_s": st.floats(min_value=0, max_value=1e4),
            "prompt": words,
            "max_tokens": st.integers(min_value=1, max_value=4096),
        },
        optional={
            "seed": st.integers(min_value=0, max_value=2**63 - 1),
            "temperature": st.floats(min_value=0, max_value=2),
            "top_p": st.floats(min_value=0.01, max_value=1),
            "task": st.text(min_size=1, max_size=20),
            "class": st.sampled_from(["interactive", "batch"]),
            "metadata": st.dictionaries(st.text(max_size=8), json_values, max_size=3),
        },
    ),
    "openai_log": st.fixed_dictionaries(
        {
            "custom_id": st.just(AUTO),
            "timestamp": st.floats(min_value=1.6e9, max_value=1.8e9),
            "body": st.fixed_dictionaries(
                {"messages": st.lists(valid_message, min_size=1, max_size=2)},
                optional={
                    "max_tokens": st.integers(min_value=1, max_value=4096),
                    "seed": st.integers(min_value=0, max_value=2**63 - 1),
                    "metadata": st.fixed_dictionaries(
                        {}, optional={"task": words, "class": st.just("batch")}
                    ),
                },
            ),
        }
    ),
    "mooncake": st.fixed_dictionaries(
        {
            "timestamp": st.integers(min_value=0, max_value=10**7),
            "input_length": st.integers(min_value=0, max_value=5000),
            "output_length": st.integers(min_value=1, max_value=500),
            "hash_ids": st.lists(st.integers(min_value=0, max_value=1000), max_size=3),
        }
    ),
    "mtbench": st.fixed_dictionaries(
        {
            "question_id": st.just(AUTO),
            "category": st.sampled_from(["coding", "math", "writing", "other"]),
            "turns": st.lists(words, min_size=1, max_size=3),
        }
    ),
    "sharegpt": st.fixed_dictionaries(
        {
            "id": st.just(AUTO),
            "conversations": st.lists(
                st.fixed_dictionaries({"from": st.just("human"), "value": words}), min_size=1, max_size=3
            ),
        }
    ),
    "humaneval": st.fixed_dictionaries(
        {"task_id": st.just(AUTO), "prompt": words, "entry_point": words, "test": st.text(max_size=30)}
    ),
    "bfcl": st.fixed_dictionaries(
        {
            "id": st.just(AUTO),
            "question": st.lists(st.lists(valid_message, min_size=1, max_size=2), min_size=1, max_size=2),
            "function": st.lists(
                st.fixed_dictionaries(
                    {
                        "name": words,
                        "parameters": st.fixed_dictionaries(
                            {
                                "type": st.just("dict"),
                                "properties": st.dictionaries(words, st.just({"type": "str"})),
                            }
                        ),
                    }
                ),
                max_size=2,
            ),
        }
    ),
    "gsm8k": st.fixed_dictionaries(
        {"id": st.just(AUTO), "question": words, "answer": words.map(lambda t: t + " #### 42")}
    ),
    "jsonschema": st.fixed_dictionaries(
        {
            "id": st.just(AUTO),
            "schema": st.fixed_dictionaries(
                {"type": st.just("object"), "properties": st.dictionaries(words, st.just({"type": "string"}))}
            ),
        }
    ),
}


# Values aimed at the columns and the decoder: out of a 64-bit column, longer than a char column, an
# integral float for an integer column, and a value nested 20,000 deep (spliced in as raw JSON text;
# Hypothesis raises the recursion limit while it runs a test, so 1,000 would not overflow here).
DEEP = "__nested_20000_deep__"
hostile = st.sampled_from([DEEP, 2**63, 10**250, 5.0, "x" * 201, 2**64 + 1, -1, 1e300, -0.0, "t" * 61, ""])


def _near_valid(fmt: str) -> st.SearchStrategy[list]:
    mutation = st.dictionaries(st.sampled_from(KEYS[fmt]), hostile | hostile | values, min_size=1, max_size=2)
    item = st.builds(lambda base, change: base | change, BASES[fmt], st.just({}) | mutation)
    key = ID_KEYS.get(fmt, "id")

    def number(items: list) -> list:
        return [item | {key: f"{fmt}-{i}"} if item.get(key) == AUTO else item for i, item in enumerate(items)]

    return st.lists(item, min_size=1, max_size=4).map(number)


def _raw(text: str) -> bytes:
    return text.replace(f'"{DEEP}"', "[" * 20_000 + "]" * 20_000).encode()


def _json_lines(items: list) -> bytes:
    return _raw("".join(json.dumps(item) + "\n" for item in items))


CSV_HEADERS = {
    "azure": ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
    "burstgpt": ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"],
}
cells = (
    st.text(max_size=30)
    | st.integers().map(str)
    | st.floats().map(str)
    | st.datetimes().map(lambda d: d.isoformat())
)


tokens = st.integers(min_value=0, max_value=5000).map(str)
azure_time = st.datetimes().map(lambda d: d.replace(microsecond=0).isoformat() + ".1234567")
CSV_ROWS = {
    "azure": st.tuples(azure_time, tokens, tokens),
    "burstgpt": st.tuples(
        st.floats(min_value=0, max_value=1e6).map(str),
        st.sampled_from(["ChatGPT", "GPT-4"]),
        tokens,
        tokens,
        tokens,
        st.sampled_from(["Conversation log", "API log"]),
    ),
}


def _csv(header: list[str], rows: list) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue().encode("utf-8", errors="surrogatepass")


# --- the property -----------------------------------------------------------------------------------


def _import_once(user, content: bytes, *, fmt: str | None, filename: str, **extra) -> None:
    before = (Trace.objects.count(), TraceRequest.objects.count())
    options = {"pair_with": POOL} if fmt and PARSERS[fmt].kind == TIMING else {}
    options |= extra
    try:
        result = trace_import(
            file=io.BytesIO(content),
            name="fuzz",
            uploaded_by=user,
            filename=filename,
            source_format=fmt,
            **options,
        )
    except TraceImportError as exc:
        event(f"refused: {exc.errors[0].message[:40] if exc.errors else '?'}")
        assert exc.errors, "an import error names at least one problem"
        for error in exc.errors:
            assert error.message and error.file, error
            assert error.line is None or error.line >= 1, error
        assert (Trace.objects.count(), TraceRequest.objects.count()) == before, "nothing stored on error"
    else:
        trace = result.trace
        event("stored")
        assert trace.request_count >= 1
        assert trace.requests.count() == trace.request_count, "never a partial trace"


JSON_FORMATS = list(KEYS)


@pytest.mark.parametrize("fmt", JSON_FORMATS)
def test_it_stores_or_locates_arbitrary_json_lines(engineer, fmt):
    @FUZZ
    @given(items=_near_valid(fmt) | st.lists(_object(fmt) | values, max_size=4))
    def check(items):
        _import_once(engineer, _json_lines(items), fmt=fmt, filename=f"fuzz-{fmt}.jsonl")

    check()


@pytest.mark.parametrize(
    "fmt", ["mtbench", "sharegpt", "humaneval", "bfcl", "gsm8k", "jsonschema", "prompt_list"]
)
def test_it_stores_or_locates_arbitrary_json_arrays(engineer, fmt):
    item = st.text(max_size=30) | values if fmt == "prompt_list" else _object(fmt) | values
    near = st.lists(words, min_size=1, max_size=4) if fmt == "prompt_list" else _near_valid(fmt)

    @FUZZ
    @given(items=near | st.lists(item, max_size=4), indent=st.sampled_from([None, 1]))
    def check(items, indent):
        content = _raw(json.dumps(items, indent=indent))
        _import_once(engineer, content, fmt=fmt, filename=f"fuzz-{fmt}.json")

    check()


@pytest.mark.parametrize("fmt", list(CSV_HEADERS))
def test_it_stores_or_locates_arbitrary_csv_rows(engineer, fmt):
    header = CSV_HEADERS[fmt]

    @FUZZ
    @given(
        rows=st.lists(st.lists(cells, min_size=len(header) - 1, max_size=len(header) + 1), max_size=4)
        | st.lists(CSV_ROWS[fmt], min_size=1, max_size=4),
        order=st.permutations(header),
    )
    def check(rows, order):
        # near-valid rows are written in header order, so they follow the permutation
        rows = [[r[header.index(c)] for c in order] if isinstance(r, tuple) else r for r in rows]
        _import_once(engineer, _csv(list(order), rows), fmt=fmt, filename=f"fuzz-{fmt}.csv")

    check()


@pytest.mark.parametrize("fmt", [None, *PARSERS])
def test_it_stores_or_locates_arbitrary_bytes(engineer, fmt):
    @FUZZ
    @given(
        content=st.binary(max_size=300) | st.text(max_size=300).map(lambda t: t.encode("utf-8", "replace"))
    )
    def check(content):
        _import_once(engineer, content, fmt=fmt, filename="fuzz.bin")

    check()


# --- field-mapped prompt sets and gzip ---------------------------------------------------------------

MAPPINGS = [
    field_mapping_parse(prompt_field="q"),
    field_mapping_parse(prompt_field="a.b", id_field="id", keep_fields=["t", "a.c"]),
    field_mapping_parse(prompt_field="m", task_field="t", system_prompt="Be brief."),
    field_mapping_parse(prompt_field="m.0.content", id_field="a.b"),
]
mapped_record = st.fixed_dictionaries(
    {},
    optional={
        "q": st.text(max_size=30) | values,
        "a": st.fixed_dictionaries({}, optional={"b": st.text(max_size=20) | values, "c": values}) | values,
        "m": messages | values,
        "id": st.text(max_size=210) | st.integers() | values,
        "t": st.text(max_size=70) | values,
    },
)


def _mapped_content(items: list, container: str) -> tuple[bytes, str]:
    if container == "array":
        return _raw(json.dumps(items)), "fuzz.json"
    if container == "csv":
        header = sorted({key for item in items if isinstance(item, dict) for key in item}) or ["q"]
        rows = [[json.dumps(item.get(k)) if isinstance(item, dict) else "" for k in header] for item in items]
        return _csv(header, rows), "fuzz.csv"
    content = _json_lines(items)
    return (gzip.compress(content), "fuzz.jsonl.gz") if container == "gzip" else (content, "fuzz.jsonl")


def test_it_stores_or_locates_arbitrary_mapped_records(engineer):
    @FUZZ
    @given(
        items=st.lists(mapped_record | values, max_size=4),
        container=st.sampled_from(["jsonl", "array", "csv", "gzip"]),
        mapping=st.sampled_from(MAPPINGS),
    )
    def check(items, container, mapping):
        content, filename = _mapped_content(items, container)
        _import_once(engineer, content, fmt=None, filename=filename, mapping=mapping, arrival="poisson:1")

    check()


def test_it_stores_or_locates_arbitrary_gzip_data(engineer):
    native = st.lists(_object("native") | values, max_size=3).map(_json_lines)

    @FUZZ
    @given(
        content=st.binary(max_size=300) | native,
        cut=st.none() | st.integers(min_value=0, max_value=400),
        mapping=st.none() | st.sampled_from(MAPPINGS),
    )
    def check(content, cut, mapping):
        packed = gzip.compress(content)
        packed = packed if cut is None else packed[:cut]  # truncated, or only the magic bytes
        _import_once(engineer, packed, fmt=None, filename="fuzz.gz", mapping=mapping)

    check()
