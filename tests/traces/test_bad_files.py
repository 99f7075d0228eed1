"""A corpus of broken files: each fails with a message naming the line and field, and stores nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.traces.errors import TraceImportError
from console.traces.models import Trace, TraceRequest
from console.traces.services import trace_import, trace_import_path

pytestmark = pytest.mark.django_db

BAD = Path(__file__).parent / "bad"

# file, expected (line, field, message fragment), extra import options
CORPUS = [
    ("invalid_json.jsonl", (2, None, "invalid JSON: Expecting ',' delimiter"), {}),
    ("missing_max_tokens.jsonl", (2, "max_tokens", "required field is missing"), {}),
    ("wrong_type.jsonl", (2, "max_tokens", "must be an integer, got string"), {}),
    ("negative_arrival.jsonl", (2, "arrival_s", "must be >= 0, got -3.5"), {}),
    ("nonfinite_arrival.jsonl", (2, "arrival_s", "must be a finite number"), {}),
    ("duplicate_ids.jsonl", (3, "id", "duplicate id 'r1'"), {}),
    ("max_tokens_zero.jsonl", (1, "max_tokens", "must be >= 1, got 0"), {}),
    ("max_tokens_over_ceiling.jsonl", (2, "max_tokens", "must be at most 32768 (the ceiling)"), {}),
    ("unknown_class.jsonl", (2, "class", 'must be one of "interactive", "batch", got "urgent"'), {}),
    (
        "invalid_response_format_schema.jsonl",
        (1, "response_format.json_schema.schema", "is not a valid JSON Schema"),
        {},
    ),
    ("json_schema_without_schema.jsonl", (1, "response_format.json_schema", "required field is missing"), {}),
    ("tools_not_openai.jsonl", (1, "tools[0].type", "required field is missing"), {}),
    (
        "tool_parameters_not_a_schema.jsonl",
        (1, "tools[0].function.parameters", "is not a valid JSON Schema"),
        {},
    ),
    ("non_utf8.jsonl", (2, None, "not valid UTF-8: byte 0xe9 at column 46"), {}),
    ("empty.jsonl", (None, None, "the file is empty"), {}),
    ("prompt_and_messages.jsonl", (1, None, "needs exactly one of: prompt, messages"), {}),
    ("line_not_an_object.jsonl", (2, None, "each line must be a JSON object, got list"), {}),
    ("unknown_field.jsonl", (2, "max_token", "unknown field"), {}),
    (
        "burstgpt_negative_tokens.csv",
        (3, "Response tokens", "must be an integer >= 0, got '-3'"),
        {"pair_with": str(Path(__file__).parent / "fixtures" / "openai_requests.jsonl")},
    ),
    ("mooncake_without_pool.jsonl", (None, None, "give a prompt pool to pair with"), {}),
    ("unknown_format.txt", (1, None, "the format could not be detected"), {}),
    ("array_not_closed.json", (3, None, "the array is not closed"), {"arrival": "poisson:1"}),
    ("openai_bad_timestamp.jsonl", (1, "timestamp", "is not a timestamp"), {}),
    ("too_large.jsonl", (None, None, "larger than the size limit of 4,096 bytes"), {"max_bytes": 4096}),
]


def test_it_has_a_corpus_of_at_least_15_distinct_bad_files():
    names = [name for name, _, _ in CORPUS]
    assert len(set(names)) >= 15
    assert sorted(p.name for p in BAD.iterdir()) == sorted(names)
    assert len({(BAD / n).read_bytes() for n in names}) == len(names)


@pytest.mark.parametrize("name,expected,options", CORPUS, ids=[c[0] for c in CORPUS])
def test_it_rejects_each_bad_file_and_stores_nothing(engineer, name, expected, options):
    before = (Trace.objects.count(), TraceRequest.objects.count())
    with pytest.raises(TraceImportError) as info:
        trace_import_path(path=BAD / name, uploaded_by=engineer, **options)
    line, field, fragment = expected
    matching = [e for e in info.value.errors if fragment in e.message]
    assert matching, f"{name}: {info.value.lines()}"
    assert (matching[0].line, matching[0].field, matching[0].file) == (line, field, name)
    assert (Trace.objects.count(), TraceRequest.objects.count()) == before


def _good(i: int) -> str:
    return json.dumps({"id": f"r{i}", "arrival_s": i / 100, "prompt": f"p{i}", "max_tokens": 16})


def test_it_reports_the_one_bad_line_among_100000_and_stores_nothing(engineer, tmp_path):
    path = tmp_path / "big.jsonl"
    with path.open("w") as fh:
        for i in range(100_000):
            fh.write(
                (
                    _good(i)
                    if i != 73_210
                    else '{"id": "bad", "arrival_s": -1, "prompt": "x", "max_tokens": 4}'
                )
                + "\n"
            )
    with pytest.raises(TraceImportError) as info:
        trace_import_path(path=path, uploaded_by=engineer)
    assert [(e.line, e.field) for e in info.value.errors] == [(73_211, "arrival_s")]
    assert Trace.objects.count() == 0 and TraceRequest.objects.count() == 0


def test_it_lists_every_bad_line_up_to_the_cap_then_counts_the_rest(engineer, tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_text("".join(_good(i) + "\n" if i % 2 else "not json\n" for i in range(400)))
    with pytest.raises(TraceImportError) as info:
        trace_import_path(path=path, uploaded_by=engineer, error_cap=50)
    assert len(info.value.errors) == 50 and info.value.more == 150 and info.value.total == 200
    assert [e.line for e in info.value.errors[:3]] == [1, 3, 5]
    assert info.value.lines()[-1] == "... and 150 more errors not shown"


def test_it_refuses_an_oversized_upload_before_reading_it_all(engineer):
    class Endless:
        """A file that would never end: only streaming refusal can finish."""

        read_bytes = 0

        def seek(self, pos):
            pass

        def read(self, n=-1):
            n = 1 << 16 if n is None or n < 0 else n
            self.read_bytes += n
            return b"x" * n

    endless = Endless()
    with pytest.raises(TraceImportError, match="larger than the size limit"):
        trace_import(
            file=endless, name="endless", uploaded_by=engineer, filename="endless.jsonl", max_bytes=5 << 20
        )
    assert endless.read_bytes <= (5 << 20) + (1 << 20)


def test_it_rejects_a_bad_arrival_spec_and_holdout(engineer):
    with pytest.raises(TraceImportError) as info:
        trace_import_path(
            path=BAD / "empty.jsonl", uploaded_by=engineer, arrival="weibull:2", holdout_fraction=1.5
        )
    fields = {e.field for e in info.value.errors}
    assert fields == {"arrival", "holdout"}
