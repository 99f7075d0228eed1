"""Build console/traces/demo/demo_trace.jsonl: about 30 real prompts for `make demo`, deterministically.

    .venv/bin/python scripts/build_demo_trace.py [--data ../shared/data] [--out console/traces/demo/demo_trace.jsonl]

Sources (../shared/data, see each folder's README): HumanEval (code), Vicuna-Bench and ShareGPT (chat),
GSM8K (math), WMT14 EN-DE (translation), BFCL (tool calls, with `tools`) and JSONSchemaBench (JSON output,
with `response_format`). Prompts are drawn from the shorter half of each set with a fixed seed, max_tokens
are modest (48-96: the demo runs on 2 CPU cores), decoding is greedy (temperature 0), and arrivals come
from a Poisson process at 0.25 requests/s. Running it twice writes the same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console.traces.parsers.prompts import JSON_INSTRUCTION, bfcl_parameters  # noqa: E402

SEED = 20260101
RATE_RPS = 0.25
PLAN = [  # (source, count, task, class, max_tokens)
    ("humaneval", 5, "code", "interactive", 96),
    ("vicuna_bench", 3, "chat", "interactive", 64),
    ("sharegpt", 3, "chat", "interactive", 64),
    ("gsm8k", 5, "math", "batch", 96),
    ("wmt14_en_de", 5, "translation", "batch", 48),
    ("bfcl", 5, "tool_call", "interactive", 64),
    ("jsonschemabench", 4, "json", "batch", 80),
]
LICENSES = {
    "humaneval": "MIT",
    "vicuna_bench": "Apache-2.0",
    "sharegpt": "Apache-2.0 (dataset card)",
    "gsm8k": "MIT",
    "wmt14_en_de": "MIT (MCSD repo); WMT14 research use",
    "bfcl": "Apache-2.0",
    "jsonschemabench": "MIT",
}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]


def _plain(text: str) -> bool:
    """A self-contained English chat prompt: ASCII, no links, long enough to mean something."""
    return text.isascii() and "http" not in text and len(text) > 40


def _pick(items: list, count: int, length, rng: random.Random) -> list:
    """``count`` items drawn from the shorter half (by ``length``), in a stable order."""
    ranked = sorted(range(len(items)), key=lambda i: (length(items[i]), i))
    shorter = sorted(ranked[: max(count, len(ranked) // 2)])
    return [items[i] for i in sorted(rng.sample(shorter, count))]


def candidates(data: Path, source: str, count: int, rng: random.Random) -> list[dict]:
    """Requests without id/arrival: content plus metadata naming the source row."""
    prompts = data / "prompts"
    out: list[dict] = []
    if source == "humaneval":
        for row in _pick(
            _jsonl(prompts / "humaneval/HumanEval.jsonl"), count, lambda r: len(r["prompt"]), rng
        ):
            meta = {"source_id": row["task_id"], "entry_point": row["entry_point"], "test": row["test"]}
            out.append({"prompt": row["prompt"], "metadata": meta})
    elif source == "vicuna_bench":
        rows = [
            r
            for r in _jsonl(prompts / "vicuna_bench/question.jsonl")
            if r["category"] not in ("coding", "math")
        ]
        for row in _pick(rows, count, lambda r: len(r["turns"][0]), rng):
            meta = {"source_id": row["question_id"], "category": row["category"]}
            out.append({"messages": [{"role": "user", "content": row["turns"][0]}], "metadata": meta})
    elif source == "sharegpt":
        rows = json.loads((prompts / "sharegpt/ShareGPT_V3_filtered_500.json").read_text(encoding="utf-8"))
        rows = [r for r in rows if _plain(r["conversations"][0]["value"])]
        for row in _pick(rows, count, lambda r: len(r["conversations"][0]["value"]), rng):
            text = row["conversations"][0]["value"]
            out.append(
                {"messages": [{"role": "user", "content": text}], "metadata": {"source_id": row["id"]}}
            )
    elif source == "gsm8k":
        rows = _jsonl(prompts / "gsm8k/test.first300_filtered.jsonl")
        for row in _pick(rows, count, lambda r: len(r["question"]), rng):
            answer = row["answer"].rsplit("####", 1)[1].strip()
            meta = {"reference_answer": answer}
            out.append({"messages": [{"role": "user", "content": row["question"]}], "metadata": meta})
    elif source == "wmt14_en_de":
        rows = json.loads((prompts / "wmt14_en_de/wmt_ende.json").read_text(encoding="utf-8"))
        indexed = list(enumerate(rows))
        for i, text in _pick(indexed, count, lambda r: len(r[1]), rng):
            out.append({"prompt": text, "metadata": {"source_id": f"wmt_ende[{i}]"}})
    elif source == "bfcl":
        rows = _jsonl(prompts / "bfcl/BFCL_v4_simple_python.json")
        for row in _pick(rows, count, lambda r: len(json.dumps(r)), rng):
            tools = [
                {
                    "type": "function",
                    "function": {
                        "name": f["name"].replace(".", "_"),
                        "description": f.get("description", ""),
                        "parameters": bfcl_parameters(f["parameters"]),
                    },
                }
                for f in row["function"]
            ]
            meta = {"source_id": row["id"], "function_names": [f["name"] for f in row["function"]]}
            out.append({"messages": row["question"][0], "tools": tools, "metadata": meta})
    elif source == "jsonschemabench":
        rows = [
            r
            for r in _jsonl(prompts / "jsonschemabench/schemas_shared.jsonl")
            if isinstance(r["schema"], dict)
        ]
        for n, row in enumerate(_pick(rows, count, lambda r: len(json.dumps(r["schema"])), rng)):
            schema = row["schema"]
            content = JSON_INSTRUCTION + json.dumps(schema, ensure_ascii=False)
            response_format = {
                "type": "json_schema",
                "json_schema": {"name": f"demo_schema_{n + 1}", "schema": schema},
            }
            meta = {"source_id": row["source_path"], "subset": row["subset"]}
            out.append(
                {
                    "messages": [{"role": "user", "content": content}],
                    "response_format": response_format,
                    "metadata": meta,
                }
            )
    else:
        raise ValueError(source)
    return out


def build(data: Path) -> list[dict]:
    rng = random.Random(SEED)
    requests: list[dict] = []
    per_task: dict[str, int] = {}
    for source, count, task, traffic, max_tokens in PLAN:
        for item in candidates(data, source, count, rng):
            per_task[task] = per_task.get(task, 0) + 1
            request = {
                "id": f"demo-{task}-{per_task[task]}",
                **item,
                "max_tokens": max_tokens,
                "temperature": 0.0,
            }
            request.update({"task": task, "class": traffic})
            request["metadata"] = {"source": source, "license": LICENSES[source], **item["metadata"]}
            requests.append(request)
    rng.shuffle(requests)  # interleave tasks over time
    t = 0.0
    for request in requests:
        request["arrival_s"] = round(t, 3)
        t += rng.expovariate(RATE_RPS)
    order = ["id", "arrival_s", "prompt", "messages", "max_tokens", "temperature", "task", "class"]
    order += ["response_format", "tools", "metadata"]
    return [{k: r[k] for k in order if k in r} for r in requests]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "console/traces/demo/demo_trace.jsonl")
    args = parser.parse_args()
    requests = build(args.data)
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests), encoding="utf-8")
    print(f"wrote {len(requests)} requests to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
