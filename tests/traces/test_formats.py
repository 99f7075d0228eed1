"""Every supported format imports from the real files in the shared data, with counts that match them."""

from __future__ import annotations

import json

import pytest

from console.traces.models import Trace, TraceRequest
from console.traces.services import trace_import_path

pytestmark = pytest.mark.django_db


def _jsonl_count(path) -> int:
    return sum(1 for line in path.open(encoding="utf-8") if line.strip())


@pytest.mark.parametrize(
    "relpath,fmt,task",
    [
        ("prompts/vicuna_bench/question.jsonl", "mtbench", None),
        ("prompts/humaneval/HumanEval.jsonl", "humaneval", "code"),
        ("prompts/gsm8k/test.first300_filtered.jsonl", "gsm8k", "math"),
        ("prompts/jsonschemabench/schemas_shared.jsonl", "jsonschema", "json"),
        ("prompts/bfcl/BFCL_v4_simple_python.json", "bfcl", "tool_call"),
        ("prompts/bfcl/BFCL_v4_parallel_multiple.json", "bfcl", "tool_call"),
    ],
)
def test_it_imports_jsonl_prompt_sets_with_matching_counts(shared_data, engineer, relpath, fmt, task):
    path = shared_data / relpath
    result = trace_import_path(path=path, uploaded_by=engineer, arrival="poisson:2")
    trace = result.trace
    assert result.created
    assert trace.source_format == fmt
    assert trace.request_count == _jsonl_count(path) == trace.requests.count()
    if task:
        assert set(trace.requests.values_list("task", flat=True)) == {task}
    assert trace.arrival_spec == "poisson:2"


def test_it_imports_sharegpt_json_arrays(shared_data, engineer):
    path = shared_data / "prompts/sharegpt/ShareGPT_V3_filtered_500.json"
    trace = trace_import_path(path=path, uploaded_by=engineer, arrival="constant:1").trace
    items = json.loads(path.read_text(encoding="utf-8"))
    assert trace.source_format == "sharegpt"
    assert trace.request_count == len(items) == 500
    first = trace.requests.get(request_id=items[0]["id"])
    assert first.messages == [{"role": "user", "content": items[0]["conversations"][0]["value"]}]


def test_it_imports_a_plain_array_of_prompts(shared_data, engineer):
    path = shared_data / "prompts/wmt14_en_de/wmt_ende.json"
    trace = trace_import_path(path=path, uploaded_by=engineer, default_task="translation").trace
    assert trace.source_format == "prompt_list"
    assert trace.request_count == 1000
    assert trace.requests.filter(task="translation").count() == 1000
    assert any("no timing" in w for w in trace.warnings)


def test_it_keeps_later_turns_of_multi_turn_sets_in_metadata(shared_data, engineer):
    path = shared_data / "prompts/vicuna_bench/question.jsonl"
    trace = trace_import_path(path=path, uploaded_by=engineer, arrival="poisson:1").trace
    coding = trace.requests.filter(metadata__category="coding")
    assert coding.exists() and set(coding.values_list("task", flat=True)) == {"code"}


def test_it_turns_bfcl_functions_into_openai_tools(shared_data, engineer):
    path = shared_data / "prompts/bfcl/BFCL_v4_multiple.json"
    trace = trace_import_path(path=path, uploaded_by=engineer, arrival="poisson:1").trace
    assert trace.request_count == 200
    request = trace.requests.first()
    assert request.tools and request.tools[0]["type"] == "function"
    assert request.tools[0]["function"]["parameters"]["type"] == "object"


def test_it_imports_mooncake_by_pairing_with_counts_and_arrivals_kept(shared_data, engineer):
    path = shared_data / "traces/mooncake/conversation_trace.jsonl"
    pool = shared_data / "prompts/sharegpt/ShareGPT_V3_filtered_500.json"
    trace = trace_import_path(path=path, uploaded_by=engineer, pair_with=str(pool)).trace
    rows = [json.loads(line) for line in path.open()]
    assert trace.source_format == "mooncake"
    assert trace.request_count == len(rows) == 12031
    assert trace.is_paired and "ShareGPT" in trace.paired_with
    stored = list(trace.requests.order_by("position").values_list("arrival_s", "max_tokens"))
    assert stored == [(r["timestamp"] / 1000.0, r["output_length"]) for r in rows]


def test_it_imports_burstgpt_skipping_failed_requests(shared_data, engineer):
    path = shared_data / "traces/burstgpt/BurstGPT_1.first400.csv"
    pool = shared_data / "prompts/vicuna_bench/question.jsonl"
    trace = trace_import_path(path=path, uploaded_by=engineer, pair_with=str(pool)).trace
    lines = path.read_text().splitlines()[1:]
    failed = [row for row in lines if row.split(",")[3] == "0"]
    assert len(lines) == 400 and len(failed) == 17
    assert trace.request_count == 383
    assert any("Skipped 17 requests" in w for w in trace.warnings)
    assert trace.requests.order_by("position").first().arrival_s == 5.0


def test_it_imports_an_azure_slice_rebased_to_zero(engineer, shared_data):
    from pathlib import Path

    path = Path(__file__).parent / "fixtures" / "AzureLLMInferenceTrace_code.first200.csv"
    pool = shared_data / "prompts/humaneval/HumanEval.jsonl"
    trace = trace_import_path(path=path, uploaded_by=engineer, pair_with=str(pool)).trace
    assert trace.source_format == "azure"
    assert trace.request_count == 200
    first, second = trace.requests.order_by("position")[:2]
    assert first.arrival_s == 0.0
    assert second.arrival_s == pytest.approx(0.052, abs=1e-6)
    assert set(trace.requests.values_list("task", flat=True)) == {"code"}


def test_it_imports_openai_request_logs(engineer):
    from pathlib import Path

    path = Path(__file__).parent / "fixtures" / "openai_requests.jsonl"
    trace = trace_import_path(path=path, uploaded_by=engineer).trace
    assert trace.source_format == "openai_log"
    assert trace.request_count == _jsonl_count(path)
    assert trace.requests.order_by("position").first().arrival_s == 0.0
    assert TraceRequest.objects.filter(trace=trace, messages__isnull=False).count() == trace.request_count
    assert Trace.objects.count() == 1
