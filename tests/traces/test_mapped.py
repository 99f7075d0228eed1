"""Field-mapped prompt sets (any layout: JSON, JSONL, CSV, Parquet) and gzip files of any format."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.management import call_command

from console.traces.errors import TraceImportError
from console.traces.models import Trace, TraceRequest
from console.traces.parsers.mapped import KEEP_FIELDS_MAX, field_mapping_parse
from console.traces.preview import trace_preview
from console.traces.services import trace_delete, trace_import

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).parent / "fixtures"

# A prompt set no built-in parser knows: the prompt three levels down, references beside it.
NESTED = [
    {
        "sample": {"input": {"question": f"What is {i} + {i}?"}, "uid": f"q-{i}"},
        "reference": {"answer": str(2 * i), "tests": [f"assert add({i}, {i}) == {2 * i}"]},
        "domain": "math" if i % 2 else "arithmetic",
    }
    for i in range(12)
]
NESTED_ARGS = ["--prompt-field", "sample.input.question", "--id-field", "sample.uid"]
NESTED_ARGS += [
    "--keep-field",
    "reference.answer",
    "--keep-field",
    "reference.tests",
    "--arrival",
    "poisson:2",
]

# The same flat set in every container: CSV names the nested column "ref.answer" whole.
FLAT = [
    {"question": f"Translate 'day {i}' into German.", "uid": f"t{i}", "ref": {"answer": f"Tag {i}"}}
    for i in range(9)
]
FLAT_MAPPING = {"prompt_field": "question", "id_field": "uid", "keep_fields": ["ref.answer"]}


def _jsonl(items) -> bytes:
    return "".join(json.dumps(item) + "\n" for item in items).encode()


def _csv(items) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["question", "uid", "ref.answer"])
    for item in items:
        writer.writerow([item["question"], item["uid"], item["ref"]["answer"]])
    return out.getvalue().encode()


def _parquet(items) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(items), out, row_group_size=4)  # several row groups
    return out.getvalue()


def _rows(trace: Trace) -> list[tuple]:
    fields = ("request_id", "arrival_s", "prompt", "messages", "task", "metadata", "max_tokens", "split")
    return list(TraceRequest.objects.filter(trace=trace).order_by("position").values_list(*fields))


def _import(content: bytes, filename: str, user, **options):
    return trace_import(file=io.BytesIO(content), name="set", uploaded_by=user, filename=filename, **options)


def test_it_imports_a_prompt_under_an_unfamiliar_nested_field_with_references_in_metadata(tmp_path, capsys):
    path = tmp_path / "nested.jsonl"
    path.write_bytes(_jsonl(NESTED))
    call_command("import_trace", str(path), *NESTED_ARGS, "--task-field", "domain")
    trace = Trace.objects.get()
    assert capsys.readouterr().out.splitlines()[0] == str(trace.pk)
    assert trace.source_format == "mapped" and trace.request_count == 12 and trace.arrival_spec == "poisson:2"
    first = trace.requests.get(request_id="q-3")
    assert first.prompt == "What is 3 + 3?" and first.messages is None
    assert first.metadata["reference.answer"] == "6"
    assert first.metadata["reference.tests"] == ["assert add(3, 3) == 6"]
    assert first.task == "math" and trace.requests.get(request_id="q-2").task == "arithmetic"
    assert trace.metadata["import_options"]["mapping"]["prompt_field"] == "sample.input.question"


def test_it_imports_chat_message_lists_with_a_system_prompt_and_a_constant_task(engineer):
    items = [
        {"conv": {"msgs": [{"role": "user", "content": f"Write a haiku about {w}."}]}, "gold": w}
        for w in ("rain", "snow", "wind")
    ]
    mapping = field_mapping_parse(
        prompt_field="conv.msgs", system_prompt="You are terse.", keep_fields=["gold"]
    )
    trace = _import(_jsonl(items), "chat.jsonl", engineer, mapping=mapping, default_task="chat").trace
    requests = list(trace.requests.order_by("source_index"))
    assert [r.messages for r in requests] == [
        [{"role": "system", "content": "You are terse."}, item["conv"]["msgs"][0]] for item in items
    ]
    assert [r.request_id for r in requests] == ["record-1", "record-2", "record-3"]
    assert {r.task for r in requests} == {"chat"} and [r.metadata["gold"] for r in requests] == [
        "rain",
        "snow",
        "wind",
    ]


@pytest.mark.parametrize("container", ["array", "csv", "parquet"])
def test_it_imports_the_same_set_from_any_container_identically(engineer, container):
    mapping = field_mapping_parse(**FLAT_MAPPING)
    options = {"mapping": mapping, "arrival": "constant:3", "seed": 5}
    expected_trace = _import(_jsonl(FLAT), "flat.jsonl", engineer, **options).trace
    expected = _rows(expected_trace)
    trace_delete(trace=expected_trace)
    content = {"array": json.dumps(FLAT).encode(), "csv": _csv(FLAT), "parquet": _parquet(FLAT)}[container]
    trace = _import(content, f"flat.{container}", engineer, **options).trace
    assert len(expected) == 9 and _rows(trace) == expected
    assert trace.requests.get(request_id="t4").metadata["ref.answer"] == "Tag 4"


def test_it_imports_a_gzip_file_identically_to_the_plain_one(engineer):
    mapping = field_mapping_parse(
        prompt_field="sample.input.question", id_field="sample.uid", keep_fields=["reference.answer"]
    )
    plain = _import(_jsonl(NESTED), "nested.jsonl", engineer, mapping=mapping)
    expected = _rows(plain.trace)
    trace_delete(trace=plain.trace)
    packed = _import(gzip.compress(_jsonl(NESTED)), "nested.jsonl.gz", engineer, mapping=mapping)
    assert packed.created and _rows(packed.trace) == expected and len(expected) == 12
    assert packed.trace.metadata["compression"] == {
        "format": "gzip",
        "decompressed_bytes": len(_jsonl(NESTED)),
    }
    assert packed.trace.size_bytes == len(gzip.compress(_jsonl(NESTED)))  # the bytes uploaded


def test_it_detects_the_format_through_the_compression(engineer, shared_data):
    path = FIXTURES / "AzureLLMInferenceTrace_code.first200.csv"
    content = gzip.compress(path.read_bytes())
    pool = shared_data / "prompts/humaneval/HumanEval.jsonl"
    trace = _import(content, path.name + ".gz", engineer, pair_with=str(pool)).trace
    assert trace.source_format == "azure" and trace.request_count == 200
    assert set(trace.requests.values_list("task", flat=True)) == {"code"}  # the name hint seen through .gz
    parquet = _import(
        gzip.compress(_parquet(FLAT)),
        "flat.parquet.gz",
        engineer,
        mapping=field_mapping_parse(**FLAT_MAPPING),
    )
    assert parquet.trace.request_count == 9


def test_it_refuses_a_gzip_bomb_with_nothing_stored(engineer, settings, tmp_path, capsys):
    settings.SPECREVIEW_TRACE_MAX_BYTES = 1 << 20
    bomb = gzip.compress(b'{"id": "x", "arrival_s": 0, "prompt": "p", "max_tokens": 1}\n' * 200_000, 9)
    assert len(bomb) < 64 * 1024  # a few KB expanding to 12 MB
    with pytest.raises(TraceImportError) as info:
        _import(bomb, "bomb.jsonl.gz", engineer)
    assert "decompresses to more than the size limit of 1,048,576 bytes" in str(info.value)
    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(bomb)
    with pytest.raises(SystemExit) as exit_info:
        call_command("import_trace", str(path), "--max-bytes", str(1 << 20))
    assert exit_info.value.code == 2 and "decompresses to more than" in capsys.readouterr().err
    assert not Trace.objects.exists() and not TraceRequest.objects.exists()


def test_it_refuses_a_corrupt_or_truncated_gzip_clearly(engineer):
    whole = gzip.compress(_jsonl(NESTED))
    for content in (whole[: len(whole) // 2], whole[:10] + b"\x00" * 40 + whole[50:]):
        with pytest.raises(TraceImportError) as info:
            _import(content, "broken.jsonl.gz", engineer)
        assert "not a valid gzip file" in str(info.value) and str(info.value).startswith("broken.jsonl.gz")
    with pytest.raises(TraceImportError, match="empty once decompressed"):
        _import(gzip.compress(b"\n \n"), "blank.jsonl.gz", engineer)
    assert not Trace.objects.exists()


def test_it_locates_a_record_where_the_mapped_path_is_not_found(tmp_path, capsys):
    items = [dict(item) for item in NESTED[:5]]
    items[2] = {"sample": {"uid": "q-2", "input": {}}, "reference": {"answer": "4", "tests": []}}
    items[3] = {**NESTED[3], "sample": {"input": {"question": 42}, "uid": "q-3"}}
    del items[4]["reference"]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(_jsonl(items))
    with pytest.raises(SystemExit) as exit_info:
        call_command("import_trace", str(path), *NESTED_ARGS)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:3: sample.input.question: is missing: the prompt must be non-empty text" in err
    assert "bad.jsonl:4: sample.input.question: is a int (42)" in err
    assert "bad.jsonl:5: reference.answer: is missing: a kept field must be in every record" in err
    assert "nothing was stored" in err and not Trace.objects.exists()


def test_it_locates_a_bad_csv_row_and_parquet_row_by_number(engineer):
    mapping = field_mapping_parse(prompt_field="question", keep_fields=["ref.answer"])
    rows = [dict(item) for item in FLAT]
    rows[6] = {**rows[6], "question": ""}
    with pytest.raises(TraceImportError) as info:
        _import(_csv(rows), "flat.csv", engineer, mapping=mapping)
    assert str(info.value.errors[0]) == (
        "flat.csv:8: question: is empty text: the prompt must be non-empty text or a list of chat messages "
        "[{role, content}]"
    )
    with pytest.raises(TraceImportError) as info:
        _import(_parquet(rows), "flat.parquet", engineer, mapping=mapping)
    assert info.value.errors[0].line == 7 and info.value.errors[0].field == "question"


def test_it_bounds_the_mapping_itself():
    with pytest.raises(TraceImportError) as info:
        field_mapping_parse(
            prompt_field=".".join(["a"] * 9),
            id_field="a..b",
            task_field="x" * 201,
            keep_fields=[f"k{i}" for i in range(KEEP_FIELDS_MAX + 1)],
            system_prompt="s" * 40_000,
        )
    fields = [e.field for e in info.value.errors]
    assert fields == ["prompt_field", "id_field", "task_field", "keep_field", "system_prompt"]
    with pytest.raises(TraceImportError, match="needs a prompt field"):
        field_mapping_parse(prompt_field="", keep_fields=["answer"])
    assert field_mapping_parse(prompt_field="  ") is None


def test_it_asks_for_a_prompt_field_for_parquet_and_for_the_mapped_format(engineer):
    with pytest.raises(TraceImportError, match="Parquet file is read by field mapping"):
        _import(_parquet(FLAT), "flat.parquet", engineer)
    with pytest.raises(TraceImportError, match="needs a prompt field"):
        _import(_jsonl(FLAT), "flat.jsonl", engineer, source_format="mapped")


def test_it_previews_the_first_records_without_storing_anything(engineer):
    mapping = field_mapping_parse(prompt_field="sample.input.question", keep_fields=["reference.answer"])
    preview = trace_preview(
        file=io.BytesIO(gzip.compress(_jsonl(NESTED))), filename="n.jsonl.gz", mapping=mapping
    )
    assert preview.source_format == "mapped" and not preview.errors
    assert [r["prompt"] for r in preview.requests] == [
        item["sample"]["input"]["question"] for item in NESTED[:5]
    ]
    assert preview.requests[1]["metadata"] == {"reference.answer": "2"}
    assert not Trace.objects.exists()


def test_it_bounds_what_a_parquet_file_decodes_to(engineer, settings):
    settings.SPECREVIEW_TRACE_MAX_BYTES = 1 << 20
    items = [{"question": "x" * 200_000 + str(i)} for i in range(20)]  # 4 MB of text, compressed to little
    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(items), out, compression="zstd")
    assert out.tell() < 1 << 20
    with pytest.raises(TraceImportError) as info:
        _import(out.getvalue(), "big.parquet", engineer, mapping=field_mapping_parse(prompt_field="question"))
    assert "over the size limit of 1,048,576 bytes" in str(info.value) and not Trace.objects.exists()
    with pytest.raises(TraceImportError, match="not a readable Parquet file"):
        _import(
            b"PAR1" + b"\x00" * 100, "bad.parquet", engineer, mapping=field_mapping_parse(prompt_field="q")
        )


def test_it_refuses_an_array_of_lists_without_crashing(engineer):
    with pytest.raises(TraceImportError, match="could not be detected"):
        _import(b"[[[]]]", "lists.json", engineer)


def test_it_names_records_by_position_when_a_compact_array_puts_them_on_one_line(engineer):
    content = json.dumps([{"text": f"Say {w}."} for w in ("yes", "no", "maybe")]).encode()
    assert content.count(b"\n") == 0
    trace = _import(content, "compact.json", engineer, mapping=field_mapping_parse(prompt_field="text")).trace
    ids = list(trace.requests.order_by("source_index").values_list("request_id", "prompt"))
    assert ids == [("record-1", "Say yes."), ("record-2", "Say no."), ("record-3", "Say maybe.")]
