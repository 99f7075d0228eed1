"""Import cases whose stored result is pinned in ``import_golden.json`` (see test_import_equivalence.py).

Each case imports a file of one format with fixed options; its fingerprint is everything the import
stores (every column of every request, the trace's hash, summary, warnings and metadata) or, for bad
input, every error line. The golden file was written by the importer before the fast path existed,
so a fingerprint that changes is a behaviour change, not a refactoring.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from pathlib import Path
from typing import Any

from console.traces.errors import TraceImportError
from console.traces.models import Trace, TraceRequest
from console.traces.parsers.mapped import field_mapping_parse
from console.traces.services import trace_import
from tests.conftest import SHARED_DATA

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"
BAD = HERE / "bad"
GOLDEN = HERE / "import_golden.json"

# every kind of line error the native path reports, several per line, plus session errors at the end
BAD_NATIVE = (
    "\n".join(
        [
            json.dumps({"id": "a", "arrival_s": 0, "prompt": "x", "max_tokens": 4}),
            json.dumps({"id": "a", "arrival_s": 1, "prompt": "x", "max_tokens": 4}),
            json.dumps({"id": "", "arrival_s": -1, "messages": [], "max_tokens": 0, "colour": "red"}),
            json.dumps(
                {"id": "b", "arrival_s": 1, "messages": [{"role": "robot", "content": 3}], "max_tokens": 2}
            ),
            '{"id": "c", "arrival_s": 1e999, "prompt": "x", "max_tokens": 4, "temperature": 3}',
            json.dumps({"id": 10**300, "arrival_s": 1, "prompt": "x", "max_tokens": 10**6}),
            json.dumps({"id": "d", "arrival_s": 1, "prompt": "x", "messages": [], "max_tokens": 1.5}),
            json.dumps(
                {
                    "id": "e",
                    "arrival_s": 1,
                    "prompt": "x",
                    "max_tokens": 4,
                    "tools": [{"type": "function", "function": {"name": "bad name!", "extra": 1}}],
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "n", "schema": {"type": 5}},
                    },
                }
            ),
            json.dumps({"id": "f", "arrival_s": 1, "prompt": "x\u0000y", "max_tokens": 4}),
            json.dumps(
                {"id": "g", "session_id": "s", "turn": 2, "prompt": "x", "max_tokens": 4, "arrival_s": 1}
            ),
            json.dumps({"id": "h", "turn": 1, "prompt": "x", "max_tokens": 4}),
            json.dumps({"id": "i", "arrival_s": 1, "prompt": "x", "max_tokens": 4, "think_time_s": 2}),
            "[1, 2]",
            '{"id": "j", "arrival_s": NaN, "prompt": "x", "max_tokens": 4}',
            '{"id": "k", "arrival_s": 1, "prompt": "x", "max_tokens": 4',
            json.dumps({"id": "l", "arrival_s": 1, "prompt": "x", "max_tokens": 4, "top_p": 0, "seed": -1}),
            json.dumps(
                {"id": "m", "arrival_s": 1, "prompt": "x", "max_tokens": 4, "class": "urgent", "task": ""}
            ),
        ]
    ).encode()
    + b"\n\xff\xfe\n"
)


def _read(path: Path) -> bytes:
    return path.read_bytes()


# name -> (file name, bytes loader, import options)
CASES: dict[str, tuple[str, Any, dict[str, Any]]] = {
    "native_every_field": (
        "native_every_field.jsonl",
        lambda: _read(FIXTURES / "native_every_field.jsonl"),
        {"seed": 3},
    ),
    "native_every_field_gzip": (
        "native_every_field.jsonl.gz",
        lambda: gzip.compress(_read(FIXTURES / "native_every_field.jsonl"), mtime=0),
        {"seed": 3, "holdout_fraction": 0.5},
    ),
    "native_poisson_arrivals": (
        "native_every_field.jsonl",
        lambda: _read(FIXTURES / "native_every_field.jsonl"),
        {"arrival": "poisson:3", "seed": 11},
    ),
    "native_bad_lines": ("bad_lines.jsonl", lambda: BAD_NATIVE, {}),
    "openai_log": ("openai_requests.jsonl", lambda: _read(FIXTURES / "openai_requests.jsonl"), {}),
    "azure_paired": (
        "AzureLLMInferenceTrace_code.first200.csv",
        lambda: _read(FIXTURES / "AzureLLMInferenceTrace_code.first200.csv"),
        {"pair_with": str(SHARED_DATA / "prompts/humaneval/HumanEval.jsonl")},
    ),
    "burstgpt_paired": (
        "BurstGPT_1.first400.csv",
        lambda: _read(SHARED_DATA / "traces/burstgpt/BurstGPT_1.first400.csv"),
        {"pair_with": str(SHARED_DATA / "prompts/vicuna_bench/question.jsonl"), "seed": 2},
    ),
    "sharegpt_all_turns": (
        "ShareGPT_V3_filtered_500.json",
        lambda: _read(SHARED_DATA / "prompts/sharegpt/ShareGPT_V3_filtered_500.json"),
        {"arrival": "constant:4", "turns": "all", "think_time": "exp:5"},
    ),
    "specbench_first_turn": (
        "question.jsonl",
        lambda: _read(SHARED_DATA / "prompts/vicuna_bench/question.jsonl"),
        {"arrival": "gamma:2:1.5", "seed": 5},
    ),
    "specbench_all_turns": (
        "question.jsonl",
        lambda: _read(SHARED_DATA / "prompts/vicuna_bench/question.jsonl"),
        {"arrival": "poisson:1", "turns": "all", "think_time": "exp:4", "seed": 9},
    ),
    "humaneval": ("HumanEval.jsonl", lambda: _read(SHARED_DATA / "prompts/humaneval/HumanEval.jsonl"), {}),
    "gsm8k": (
        "test.first300_filtered.jsonl",
        lambda: _read(SHARED_DATA / "prompts/gsm8k/test.first300_filtered.jsonl"),
        {"arrival": "poisson:2"},
    ),
    "bfcl": (
        "BFCL_v4_parallel_multiple.json",
        lambda: _read(SHARED_DATA / "prompts/bfcl/BFCL_v4_parallel_multiple.json"),
        {"arrival": "poisson:1"},
    ),
    "jsonschemabench": (
        "schemas_shared.jsonl",
        lambda: _read(SHARED_DATA / "prompts/jsonschemabench/schemas_shared.jsonl"),
        {"arrival": "poisson:1"},
    ),
    "prompt_list": (
        "wmt_ende.json",
        lambda: _read(SHARED_DATA / "prompts/wmt14_en_de/wmt_ende.json"),
        {"default_task": "translation"},
    ),
    "mapped_gzip": (
        "gsm8k_mapped.jsonl.gz",
        lambda: gzip.compress(_read(SHARED_DATA / "prompts/gsm8k/test.first300_filtered.jsonl"), mtime=0),
        {
            "mapping": field_mapping_parse(prompt_field="question", keep_fields=["answer"]),
            "default_task": "math",
            "arrival": "constant:2",
        },
    ),
}
CASES.update(
    {f"bad/{path.name}": (path.name, lambda path=path: _read(path), {}) for path in sorted(BAD.iterdir())}
)


def _plain(value: Any) -> Any:
    """JSON-ready, with floats written exactly (repr) so a changed last digit changes the digest."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


ROW_COLUMNS = [f.name for f in TraceRequest._meta.concrete_fields if f.name not in ("id", "trace")]


def stored_rows(trace: Trace) -> list[list[Any]]:
    return [
        _plain(list(row))
        for row in TraceRequest.objects.filter(trace=trace).order_by("position").values_list(*ROW_COLUMNS)
    ]


def _portable(metadata: dict[str, Any]) -> dict[str, Any]:
    """The import options name the pool file by its absolute path; the golden file must not depend
    on where the shared data lies on the machine that runs the tests."""
    options = metadata.get("import_options") or {}
    if isinstance(options.get("pair_with"), str):
        path = Path(options["pair_with"]).resolve()
        if path.is_relative_to(SHARED_DATA.resolve()):
            options["pair_with"] = "<shared-data>/" + path.relative_to(SHARED_DATA.resolve()).as_posix()
    return metadata


def fingerprint(name: str, user: Any) -> dict[str, Any]:
    """What importing case ``name`` stores (or the errors it reports), in a JSON-ready form."""
    filename, load, options = CASES[name]
    try:
        result = trace_import(
            file=io.BytesIO(load()), name=name, uploaded_by=user, filename=filename, **options
        )
    except TraceImportError as exc:
        return {"errors": exc.lines(), "stored": Trace.objects.filter(name=name).count()}
    trace = result.trace
    rows = stored_rows(trace)
    text = json.dumps(rows, sort_keys=True, ensure_ascii=False)
    return {
        "content_sha256": trace.content_sha256,
        "request_count": trace.request_count,
        "stored": len(rows),
        "rows_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "first_row": rows[0],
        "last_row": rows[-1],
        "summary": _plain(trace.summary),
        "warnings": trace.warnings,
        "metadata": _portable(_plain(trace.metadata)),
        "arrival_spec": trace.arrival_spec,
        "paired_with": trace.paired_with,
    }
