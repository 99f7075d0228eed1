"""What specreview's hf engine costs on top of transformers: tokens/s and time to first token
through ``HFEngine.stream`` versus the same loaded model called directly with ``model.generate``.

Same process, same model object, same prompts, same generation settings (the engine's own
``generation_kwargs``), greedy. Direct and engine calls alternate prompt by prompt, so load
changes on the machine hit both alike. Target: ratio (engine / direct) >= 0.95.

Time to first token is measured on long templated chat prompts (``--ttft-prompt-tokens``, after
the chat template; real texts from ../shared/data joined until that length), each call
generating ``--ttft-max-tokens`` tokens. The direct call's first token is timed by a streamer
that only reads the clock; the engine's is the arrival of its first chunk at the consumer.
TTFT ratio = direct TTFT / specreview TTFT (>= 0.95: the engine adds at most ~5%).

On a shared machine single calls swing by 2x; the median of the per-request pair ratios
(same request, back to back) and the process CPU time per token are the steadier readings.

    .venv/bin/python bench/engine_overhead.py                # smollm2-135m, 8 prompts x 64 tokens
    .venv/bin/python bench/engine_overhead.py --model qwen2.5-coder-0.5b --prompts 4
    .venv/bin/python bench/engine_overhead.py --prompts 3 --max-tokens 24 --ttft-prompts 3 --ttft-prompt-tokens 512
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


def long_prompts(engine: HFEngine, n: int, tokens: int) -> list[EngineRequest]:
    """``n`` chat requests whose templated prompt is at least ``tokens`` tokens: real texts joined."""
    data = Path(os.environ.get("SPECREVIEW_SHARED_DATA", ROOT.parent / "shared" / "data")) / "prompts"
    texts = [json.loads(x)["turns"][0] for x in (data / "vicuna_bench/question.jsonl").open()]
    texts += [json.loads(x)["prompt"] for x in (data / "humaneval/HumanEval.jsonl").open()]
    out: list[EngineRequest] = []
    start = 0
    for i in range(n):
        parts: list[str] = []
        while True:
            parts.append(texts[start % len(texts)])
            start += 1
            request = EngineRequest(
                request_id=f"long-{i}",
                max_tokens=0,
                messages=[{"role": "user", "content": "Answer each in turn.\n\n" + "\n\n".join(parts)}],
            )
            if engine.encode(request).shape[1] >= tokens:
                break
        out.append(request)
    return out


class _FirstToken:
    """A streamer that only notes when the first generated token arrives (the first put is the prompt)."""

    def __init__(self) -> None:
        self.puts = 0
        self.first_t: float | None = None

    def put(self, value: Any) -> None:  # noqa: ARG002
        self.puts += 1
        if self.puts == 2:
            self.first_t = time.perf_counter()

    def end(self) -> None:
        pass


def direct_ttft(engine: HFEngine, request: EngineRequest) -> tuple[float, int]:
    """Seconds from the call to the first generated token through plain ``model.generate``, and the prompt's tokens."""
    import torch

    t0 = time.perf_counter()
    input_ids = engine.encode(request)
    clock = _FirstToken()
    with torch.inference_mode():
        engine._model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            streamer=clock,
            **engine.generation_kwargs(request),
        )
    assert clock.first_t is not None
    return clock.first_t - t0, int(input_ids.shape[1])


def engine_ttft(engine: HFEngine, request: EngineRequest) -> tuple[float, int]:
    """Seconds from the ``stream`` call to the first chunk at the consumer, and the prompt tokens it reported."""

    async def go() -> tuple[float, int]:
        t0 = time.perf_counter()
        first: float | None = None
        prompt = 0
        async for chunk in engine.stream(request):
            if first is None and chunk.token_ids:
                first = time.perf_counter()
            prompt = chunk.prompt_tokens or prompt
        assert first is not None
        return first - t0, prompt

    return asyncio.run(go())


def measure_ttft(engine: HFEngine, requests: list[EngineRequest], repeats: int) -> dict[str, Any]:
    """Median TTFT (seconds) per path over long templated prompts, direct and engine calls alternating."""
    import dataclasses

    out: dict[str, Any] = {"direct": [], "engine": [], "pair_ratios": [], "prompt_tokens": []}
    for r in range(repeats):
        for i, request in enumerate(requests):
            request = dataclasses.replace(request, request_id=f"{request.request_id}-r{r}")
            order = ("direct", "engine") if (i + r) % 2 == 0 else ("engine", "direct")
            got = {}
            for path in order:
                got[path] = direct_ttft(engine, request) if path == "direct" else engine_ttft(engine, request)
                out[path].append(got[path][0])
            if got["direct"][1] != got["engine"][1]:
                raise SystemExit(f"prompt length differs: direct {got['direct'][1]} vs engine {got['engine'][1]}")
            out["prompt_tokens"].append(got["engine"][1])
            out["pair_ratios"].append(got["direct"][0] / got["engine"][0])
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
    parser.add_argument("--ttft-prompts", type=int, default=3, help="long prompts for the TTFT comparison")
    parser.add_argument(
        "--ttft-prompt-tokens", type=int, default=512, help="templated length of each TTFT prompt (tokens)"
    )
    parser.add_argument("--ttft-max-tokens", type=int, default=2, help="tokens generated per TTFT call")
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
        f"{'mismatches':>10} {'direct TTFT s':>13} {'specreview TTFT s':>17} {'TTFT ratio':>10} "
        f"{'median pair TTFT ratio':>22}"
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
            long = [
                dataclasses.replace(r, max_tokens=args.ttft_max_tokens)
                for r in long_prompts(engine, args.ttft_prompts, args.ttft_prompt_tokens)
            ]
            ttft = measure_ttft(engine, long, args.repeats)
        finally:
            engine.stop()
        dt_, et_ = median(ttft["direct"]), median(ttft["engine"])
        d, e = t["direct_tokens"] / t["direct_s"], t["engine_tokens"] / t["engine_s"]
        dc, ec = 1000 * t["direct_cpu_s"] / t["direct_tokens"], 1000 * t["engine_cpu_s"] / t["engine_tokens"]
        print(
            f"{name:<9} {d:>12.2f} {e:>16.2f} {e / d:>6.3f} {median(t['pair_ratios']):>17.3f} {dc:>17.1f} {ec:>21.1f} "
            f"{int(t['engine_tokens']):>6} {int(t['mismatches']):>10} {dt_:>13.3f} {et_:>17.3f} {dt_ / et_:>10.3f} "
            f"{median(ttft['pair_ratios']):>22.3f}"
        )
        print(
            f"          TTFT prompts: {len(long)} x {args.repeats}, templated prompt tokens "
            f"{min(ttft['prompt_tokens'])}-{max(ttft['prompt_tokens'])} (direct and engine counts equal)"
        )
        sys.stdout.flush()
    print(f"threads {torch.get_num_threads()}, load average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
