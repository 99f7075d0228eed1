"""What specreview's hf engine costs on top of transformers: tokens/s through ``HFEngine.stream``
versus the same loaded model called directly with ``model.generate``.

Same process, same model object, same prompts, same generation settings (the engine's own
``generation_kwargs``), greedy. Direct and engine calls alternate prompt by prompt, so load
changes on the machine hit both alike. Target: ratio (engine / direct) >= 0.95.

On a shared machine single calls swing by 2x; the median of the per-request pair ratios
(same request, back to back) and the process CPU time per token are the steadier readings.

    .venv/bin/python bench/engine_overhead.py                # smollm2-135m, 8 prompts x 64 tokens
    .venv/bin/python bench/engine_overhead.py --model qwen2.5-coder-0.5b --prompts 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from workers.engines.base import EngineConfig, EngineRequest  # noqa: E402
from workers.engines.hf import HFEngine  # noqa: E402


def shared_prompts(n: int) -> list[EngineRequest]:
    """Real prompts, alternating code (raw HumanEval) with chat (Vicuna) and translation (WMT14)."""
    data = Path(os.environ.get("SPECREVIEW_SHARED_DATA", ROOT.parent / "shared" / "data")) / "prompts"
    code = [json.loads(x)["prompt"] for x in (data / "humaneval/HumanEval.jsonl").open()]
    chat = [json.loads(x)["turns"][0] for x in (data / "vicuna_bench/question.jsonl").open()]
    wmt = json.loads((data / "wmt14_en_de/wmt_ende.json").read_text())
    out: list[EngineRequest] = []
    for i in range(n):
        if i % 3 == 0:
            out.append(EngineRequest(request_id=f"code-{i}", max_tokens=0, prompt=code[i]))
        else:
            text = chat[i] if i % 3 == 1 else wmt[i]
            out.append(
                EngineRequest(
                    request_id=f"chat-{i}", max_tokens=0, messages=[{"role": "user", "content": text}]
                )
            )
    return out


def direct(engine: HFEngine, request: EngineRequest) -> list[int]:
    """The same request, straight through ``model.generate``: no streamer, no step counting, no thread."""
    import torch

    input_ids = engine.encode(request)
    with torch.inference_mode():
        out = engine._model.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), **engine.generation_kwargs(request)
        )
    return out[0, input_ids.shape[1] :].tolist()


def through_engine(engine: HFEngine, request: EngineRequest) -> list[int]:
    async def go():
        return [t async for c in engine.stream(request) for t in c.token_ids]

    return asyncio.run(go())


def measure(
    engine: HFEngine, requests: list[EngineRequest], repeats: int, *, verbose: bool = False
) -> dict[str, Any]:
    """Seconds (wall and process CPU) and tokens per path, direct and engine calls alternating."""
    import dataclasses

    through_engine(engine, requests[0])  # warm-up, both paths share it
    direct(engine, requests[0])
    totals: dict[str, Any] = {"mismatches": 0, "pair_ratios": []}
    for path in ("direct", "engine"):
        totals.update({f"{path}_s": 0.0, f"{path}_cpu_s": 0.0, f"{path}_tokens": 0})
    for r in range(repeats):
        for i, request in enumerate(requests):
            request = dataclasses.replace(request, request_id=f"{request.request_id}-r{r}")
            # Alternate which path goes first, so neither always runs on a warmer cache.
            order = ("direct", "engine") if (i + r) % 2 == 0 else ("engine", "direct")
            outputs, times = {}, {}
            for path in order:
                t0, c0 = time.perf_counter(), time.process_time()
                outputs[path] = (
                    direct(engine, request) if path == "direct" else through_engine(engine, request)
                )
                times[path] = time.perf_counter() - t0
                totals[f"{path}_s"] += times[path]
                totals[f"{path}_cpu_s"] += time.process_time() - c0
                totals[f"{path}_tokens"] += len(outputs[path])
                if verbose:
                    print(
                        f"  {request.request_id:<14} {path:<6} {len(outputs[path]):>3} tokens {time.perf_counter() - t0:7.3f} s"
                    )
            totals["mismatches"] += outputs["direct"] != outputs["engine"]
            # Same request, back to back: the engine's tokens/s over the direct call's.
            totals["pair_ratios"].append(
                (len(outputs["engine"]) / times["engine"]) / (len(outputs["direct"]) / times["direct"])
            )
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--k", type=int, default=5, help="ngram num_speculative_tokens")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all usable CPUs)")
    parser.add_argument("--verbose", action="store_true", help="print every call's time")
    args = parser.parse_args()

    import dataclasses

    import torch
    import transformers

    requests = [dataclasses.replace(r, max_tokens=args.max_tokens) for r in shared_prompts(args.prompts)]
    # prompt_lookup_min=1 is transformers' own behaviour, so the direct call runs the same algorithm.
    ngram = {
        "method": "ngram",
        "num_speculative_tokens": args.k,
        "prompt_lookup_max": 3,
        "prompt_lookup_min": 1,
    }
    engine_args = {"dtype": args.dtype, **({"num_threads": args.threads} if args.threads else {})}
    print(
        f"model {args.model}, dtype {args.dtype}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{len(requests)} prompts x {args.max_tokens} tokens x {args.repeats} repeats, greedy, "
        f"load average before {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'path':<9} {'direct tok/s':>12} {'specreview tok/s':>16} {'ratio':>6} "
        f"{'median pair ratio':>17} {'direct cpu-ms/tok':>17} {'specreview cpu-ms/tok':>21} {'tokens':>6} "
        f"{'mismatches':>10}"
    )
    for name, spec in (("baseline", None), ("ngram", ngram)):
        engine = HFEngine()
        engine.start(
            EngineConfig(
                engine="hf", target_model=args.model, engine_args=engine_args, speculative_config=spec
            )
        )
        try:
            t = measure(engine, requests, args.repeats, verbose=args.verbose)
        finally:
            engine.stop()
        d, e = t["direct_tokens"] / t["direct_s"], t["engine_tokens"] / t["engine_s"]
        dc, ec = 1000 * t["direct_cpu_s"] / t["direct_tokens"], 1000 * t["engine_cpu_s"] / t["engine_tokens"]
        print(
            f"{name:<9} {d:>12.2f} {e:>16.2f} {e / d:>6.3f} {median(t['pair_ratios']):>17.3f} {dc:>17.1f} {ec:>21.1f} "
            f"{int(t['engine_tokens']):>6} {int(t['mismatches']):>10}"
        )
        sys.stdout.flush()
    print(f"threads {torch.get_num_threads()}, load average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
