"""Hostile files and options: each gets a located error (never a 500, never a database error), nothing
is stored, and no line longer than the cap is ever read into memory."""

from __future__ import annotations

import io
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test.client import FakePayload

from console.traces.errors import TraceImportError
from console.traces.models import Trace, TraceRequest
from console.traces.services import trace_import

pytestmark = pytest.mark.django_db

POOL = "tests/traces/fixtures/openai_requests.jsonl"


def _line(**fields) -> bytes:
    row = {"id": "r", "arrival_s": 0, "prompt": "hello", "max_tokens": 8} | fields
    return (json.dumps(row) + "\n").encode()


def _import(user, content: bytes, **options):
    options.setdefault("filename", "hostile.jsonl")
    return trace_import(file=io.BytesIO(content), name=options.pop("name", "t"), uploaded_by=user, **options)


def _refused(user, content: bytes, **options) -> TraceImportError:
    before = (Trace.objects.count(), TraceRequest.objects.count())
    with pytest.raises(TraceImportError) as info:
        _import(user, content, **options)
    assert (Trace.objects.count(), TraceRequest.objects.count()) == before
    return info.value


def _nested(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_it_refuses_a_line_nested_1000_deep_with_a_located_error(engineer):
    deep = b'{"id": "d", "arrival_s": 1, "prompt": "x", "max_tokens": 4, "metadata": {"a": '
    deep += b"[" * 1000 + b"]" * 1000 + b"}}\n"
    error = _refused(engineer, _line(id="a") + deep, source_format="native")
    assert [(e.line, e.message) for e in error.errors] == [
        (2, "nested deeper than 64 levels (SPECREVIEW_TRACE_MAX_DEPTH)")
    ]


def test_it_refuses_an_array_element_nested_1000_deep(engineer):
    content = b'["a prompt", ' + b"[" * 1000 + b"]" * 1000 + b"]"
    error = _refused(engineer, content, source_format="prompt_list", filename="prompts.json")
    assert "nested deeper than 64 levels" in error.errors[0].message
    assert error.errors[0].line == 1


def test_it_accepts_nesting_up_to_the_cap_and_refuses_one_level_more(engineer, settings):
    settings.SPECREVIEW_TRACE_MAX_DEPTH = 10
    # the request object is level 1, metadata level 2, the list inside it levels 3 and up
    ok = _import(engineer, _line(id="a", metadata={"x": _nested(8)}), source_format="native")
    assert ok.created and ok.trace.request_count == 1
    error = _refused(engineer, _line(id="b", metadata={"x": _nested(9)}), source_format="native")
    assert error.errors[0].message == "nested deeper than 10 levels (SPECREVIEW_TRACE_MAX_DEPTH)"
    # brackets inside strings are text, not nesting
    text = _line(id="c", prompt="[[[[[[[[{{{{{{ code ]]]]", metadata={"s": '"\\"[[[[[[[[[[[['})
    assert _import(engineer, text, source_format="native").trace.request_count == 1


def test_it_locates_a_json_array_that_ends_inside_a_utf8_character(engineer):
    error = _refused(engineer, b'["a prompt", "caf\xc3', source_format="prompt_list", filename="cut.json")
    assert error.errors[0].message == "not valid UTF-8: byte 0xc3 at byte 17"


class _Recording(io.BytesIO):
    """Records the longest piece of the file any reader was handed at once."""

    longest = 0

    def read(self, size=-1):
        data = super().read(size)
        self.longest = max(self.longest, len(data))
        return data

    def readline(self, size=-1):
        data = super().readline(size)
        self.longest = max(self.longest, len(data))
        return data

    def __iter__(self):
        while line := self.readline():
            yield line


def test_it_skips_an_over_long_line_without_reading_it_whole(engineer, settings):
    settings.SPECREVIEW_TRACE_MAX_LINE_BYTES = 64 * 1024
    long_line = _line(id="long", prompt="x" * (3 << 20))
    content = _line(id="a") + long_line + b'{"id": "c", "arrival_s": 2, "max_tokens": 0, "prompt": "y"}\n'
    file = _Recording(content)
    before = Trace.objects.count()
    with pytest.raises(TraceImportError) as info:
        trace_import(file=file, name="t", uploaded_by=engineer, filename="long.jsonl", source_format="native")
    assert Trace.objects.count() == before
    lines = [(e.line, e.field, e.message) for e in info.value.errors]
    assert lines[0] == (
        2,
        None,
        "the line is longer than 65,536 bytes (SPECREVIEW_TRACE_MAX_LINE_BYTES): it was skipped unread",
    )
    assert lines[1][:2] == (3, "max_tokens")  # the lines after it are still read and checked
    assert file.longest <= 1 << 20  # chunks of at most 1 MiB, never the 3 MiB line


def test_it_imports_a_csv_field_over_128_kib_under_the_default_cap(engineer):
    # csv's own default limit is 131,072 characters; the cap here is SPECREVIEW_TRACE_MAX_LINE_BYTES
    content = b"Timestamp,Model,Request tokens,Response tokens\n"
    content += b"1.5," + b"m" * (200 * 1024) + b",30,40\n2.5,gpt,10,20\n"
    result = _import(engineer, content, source_format="burstgpt", filename="burst.csv", pair_with=POOL)
    assert result.trace.request_count == 2


def test_it_refuses_a_quoted_csv_field_over_the_cap_with_a_located_error(engineer, settings):
    settings.SPECREVIEW_TRACE_MAX_LINE_BYTES = 8 * 1024
    field = b'"' + b"m\n" * (10 * 1024) + b'"'  # every physical line is short; the field is not
    content = b"Timestamp,Model,Request tokens,Response tokens\n1.5,gpt,3,4\n2.5," + field + b",30,40\n"
    error = _refused(engineer, content, source_format="burstgpt", filename="burst.csv", pair_with=POOL)
    first = error.errors[0]
    assert (
        first.message
        == "invalid CSV: a field is longer than 8,192 characters (SPECREVIEW_TRACE_MAX_LINE_BYTES)"
    )
    assert first.line is not None and first.line >= 3


@pytest.mark.parametrize(
    "seed,message",
    [
        (2**63, "must be <= 9223372036854775807"),
        (2**64 + 1, "must be <= 9223372036854775807"),
        (-1, "must be >= 0"),
        (1e300, "must be <= 9223372036854775807"),
    ],
)
def test_it_refuses_a_request_seed_outside_0_to_2_63(engineer, seed, message):
    error = _refused(engineer, _line(id="a") + _line(id="b", seed=seed), source_format="native")
    assert (error.errors[0].line, error.errors[0].field) == (2, "seed")
    assert message in error.errors[0].message


def test_it_stores_an_integral_float_seed_as_an_integer(engineer):
    trace = _import(engineer, _line(id="a", seed=5.0, temperature=0.5)).trace
    assert trace.requests.get().seed == 5


def test_it_refuses_an_integer_id_longer_than_the_column(engineer):
    error = _refused(engineer, _line(id=10**250), source_format="native")
    assert (error.errors[0].line, error.errors[0].field) == (1, "id")
    assert "at most 200 characters, got 251" in error.errors[0].message


@pytest.mark.parametrize(
    "options,field,fragment",
    [
        ({"name": "n" * 201}, "name", "at most 200 characters, got 201"),
        ({"seed": 2**63}, "seed", "from 0 to 9223372036854775807"),
        ({"seed": -5}, "seed", "from 0 to 9223372036854775807"),
        ({"default_max_tokens": 0}, "default_max_tokens", "from 1 to 32768"),
        ({"default_max_tokens": 2**40}, "default_max_tokens", "from 1 to 32768"),
        ({"default_task": "t" * 61}, "task", "at most 60 characters"),
    ],
)
def test_it_refuses_import_options_the_columns_cannot_hold(engineer, options, field, fragment):
    error = _refused(engineer, _line(id="a"), **options)
    assert error.errors[0].field == field and fragment in error.errors[0].message


def test_it_names_a_trace_after_its_file_even_when_the_file_name_is_long(engineer):
    trace = _import(engineer, _line(id="a"), name="", filename="f" * 300 + ".jsonl").trace
    assert trace.name == "f" * 200


# --- the upload page ---------------------------------------------------------------------------------


class _CountingPayload(FakePayload):
    """The request body, counting how much of it the server read."""

    def __init__(self, content: bytes):
        super().__init__(content)
        self.consumed = 0

    def read(self, size=-1, /):
        data = super().read(size)
        self.consumed += len(data)
        return data

    def readline(self, size=-1, /):
        data = super().readline(size)
        self.consumed += len(data)
        return data


def _multipart(content: bytes, **fields) -> tuple[bytes, str]:
    from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

    data = {"file": SimpleUploadedFile("t.jsonl", content), "holdout_fraction": "0.3", "seed": "0"}
    data["default_max_tokens"] = "64"
    data.update(fields)
    return encode_multipart(BOUNDARY, data), MULTIPART_CONTENT


def test_it_refuses_an_oversized_upload_before_reading_its_body(engineer_client, settings):
    settings.SPECREVIEW_TRACE_MAX_BYTES = 1000
    body, content_type = _multipart(b"x" * (200 * 1024))
    payload = _CountingPayload(body)
    response = engineer_client.generic(
        "POST",
        "/traces/upload/",
        content_type=content_type,
        CONTENT_LENGTH=str(len(body)),
        **{"wsgi.input": payload},
    )
    assert response.status_code == 413
    text = response.content.decode()
    assert "over the size limit of 1,000 bytes (SPECREVIEW_TRACE_MAX_BYTES); nothing was read" in text
    assert payload.consumed == 0
    assert not Trace.objects.exists()


def test_it_answers_an_out_of_range_seed_on_the_upload_form_with_a_form_error(engineer_client):
    body, content_type = _multipart(_line(id="a"), seed=str(2**64))
    response = engineer_client.generic("POST", "/traces/upload/", body, content_type=content_type)
    assert response.status_code == 400
    assert "less than or equal to 9223372036854775807" in response.content.decode()
    assert not Trace.objects.exists()


def test_arrivals_a_subnormal_apart_store_no_infinite_rate(engineer):
    # found by the fuzz test: 2 / 5e-324 overflows to inf, which a jsonb column refuses
    content = _line(id="a", arrival_s=0.0) + _line(id="b", arrival_s=5e-324)
    trace = _import(engineer, content).trace
    assert trace.summary["duration_s"] == 0.0
    assert trace.summary["mean_rate_rps"] is None
    assert trace.requests.count() == 2


@pytest.mark.parametrize("field", ["metadata", "tools", "response_format"])
def test_a_free_form_field_holding_an_overflowing_number_is_refused_on_its_line(engineer, field):
    # 1e999 is valid JSON text and parses to inf, which the jsonb columns refuse at commit
    value = {"metadata": '{"x": [1, 1e999]}', "tools": '[{"type": "function", "function": {"name": "f", "parameters": {"maximum": 1e999}}}]', "response_format": '{"type": "json_schema", "json_schema": {"name": "s", "schema": {"maximum": -1e999}}}'}[field]
    good = _line(id="a")
    bad = ('{"id": "b", "arrival_s": 1, "prompt": "hi", "max_tokens": 8, "' + field + '": ' + value + "}\n").encode()
    error = _refused(engineer, good + bad)
    assert error.lines() == [
        f"hostile.jsonl:2: {field}: holds a number that is not finite (such as 1e999, beyond a double): "
        "numbers must be finite"
    ]
