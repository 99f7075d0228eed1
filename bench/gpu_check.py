"""The GPU-only paths, checked on a real NVIDIA GPU in one short run.

What no CPU test can run (docs/gpu-workers.md, "GPU-only paths"):

* NVML telemetry (``workers/telemetry.py``): GPU memory, power, utilisation and the energy
  counter sampled while the engine decodes, and ``hardware_describe``'s GPU list;
* NVML per-process memory (``workers/engines/vllm_metrics.gpu_memory``), the vllm engine's seam;
* the ``hf`` engine on CUDA (``engine_args.device = "cuda"``): the dtype it chooses by itself,
  ``torch.cuda`` memory in its ``memory()``, and greedy speculation (n-gram, a draft model)
  giving the baseline's tokens, with its per-step counters adding up.

Usage (on the GPU host, from the repository root)::

    python bench/gpu_check.py --model FOLDER_OR_CATALOG_NAME [--out result.json]

``--model`` may be a folder holding only a model's ``config.json`` and tokenizer files: the
check then builds that architecture with seeded random weights (the GPU host used here could
fetch no weights). Random weights say nothing about acceptance or speed; they are enough for
exactness and bookkeeping. Prints one JSON document; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workers.engines.base import EngineConfig, EngineRequest  # noqa: E402
from workers.engines.hf import HFEngine  # noqa: E402
from workers.engines.vllm_metrics import gpu_memory  # noqa: E402
from workers.telemetry import TelemetrySampler, hardware_describe, nvml_load  # noqa: E402

PROMPTS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n# Rewrite fibonacci iteratively:\n",
    "Summarise: The quick brown fox jumps over the lazy dog. The dog sleeps. The fox runs away.",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,",
    '{"name": "Ada", "role": "engineer", "team": "serving"} -> the same JSON with role set to "lead":',
]
MAX_TOKENS = 48


def model_folder(source: str, workdir: Path) -> str:
    """``source`` itself when it holds weights or is a catalog name; else a seeded random model."""
    path = Path(source)
    if not path.is_dir() or any(path.glob("*.safetensors")):
        return source
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    dest = workdir / "random-model"
    model.save_pretrained(dest)
    AutoTokenizer.from_pretrained(path).save_pretrained(dest)
    return str(dest)


def arm_run(*, model: str, dtype: str, spec: dict[str, Any] | None, device: str) -> dict[str, Any]:
    engine = HFEngine()
    engine.start(
        EngineConfig(
            engine="hf",
            target_model=model,
            engine_args={"device": device, "dtype": dtype},
            speculative_config=spec,
        )
    )

    async def one(i: int, prompt: str) -> list[Any]:
        request = EngineRequest(request_id=f"r{i}", max_tokens=MAX_TOKENS, prompt=prompt)
        return [c async for c in engine.stream(request)]

    try:
        t0 = time.perf_counter()
        outputs = [asyncio.run(one(i, p)) for i, p in enumerate(PROMPTS)]
        wall_s = time.perf_counter() - t0
        return {
            "tokens": [[t for c in chunks for t in c.token_ids] for chunks in outputs],
            "chunks": sum(len(chunks) for chunks in outputs),
            "drafted": sum(c.drafted or 0 for chunks in outputs for c in chunks),
            "accepted": sum(c.accepted or 0 for chunks in outputs for c in chunks),
            "monotonic": all(
                a.t <= b.t for chunks in outputs for a, b in zip(chunks, chunks[1:], strict=False)
            ),
            "counters": engine.counters(),
            "memory": engine.memory(),
            "versions": engine.versions(),
            "dtype_choice": engine.dtype_choice(),
            "wall_s": round(wall_s, 3),
        }
    finally:
        engine.stop()


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def checks_run(model: str, device: str) -> dict[str, Any]:
    import torch

    failures: list[str] = []
    report: dict[str, Any] = {"hardware": hardware_describe(), "nvml_loaded": nvml_load() is not None}
    if device == "cuda":
        torch.zeros(1, device="cuda")  # a CUDA context, so this process holds GPU memory for NVML
    report["gpu_memory_this_process"] = gpu_memory([os.getpid()])
    if not report["gpu_memory_this_process"].get("gpu_device_used_bytes"):
        failures.append("vllm_metrics.gpu_memory saw no device memory in use")

    sampler = TelemetrySampler()
    if not sampler.gpu:
        failures.append("TelemetrySampler found no GPU through NVML")
    sampler.start()
    arms = {
        "auto baseline": ("auto", None),
        "fp32 baseline": ("float32", None),
        "fp32 ngram k4": (
            "float32",
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1},
        ),
        "fp32 self-draft k4": (
            "float32",
            {"method": "draft_model", "model": model, "num_speculative_tokens": 4},
        ),
        "bf16 baseline": ("bfloat16", None),
        "bf16 ngram k4": (
            "bfloat16",
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1},
        ),
    }
    results = {
        name: arm_run(model=model, dtype=dtype, spec=spec, device=device)
        for name, (dtype, spec) in arms.items()
    }
    telemetry = sampler.stop()
    telemetry.pop("samples", None)
    report["telemetry"] = telemetry
    for key in ("gpu_peak_memory_bytes", "energy_j"):
        if not telemetry.get(key):
            failures.append(f"telemetry has no {key}")

    for name, res in results.items():
        if not res["memory"].get("gpu_bytes"):
            failures.append(f"{name}: engine.memory() has no gpu_bytes")
        if not res["monotonic"]:
            failures.append(f"{name}: chunk timestamps go backwards")
        if res["versions"].get("device") != device:
            failures.append(f"{name}: ran on {res['versions'].get('device')}")
        counters = res["counters"]
        if counters.get("seam_mismatches"):
            failures.append(f"{name}: {counters['seam_mismatches']} steps where the seam's counts disagreed")
        if res["drafted"] and (
            counters.get("spec_decode_num_draft_tokens"),
            counters.get("spec_decode_num_accepted_tokens"),
        ) != (
            res["drafted"],
            res["accepted"],
        ):
            failures.append(f"{name}: the engine's counters disagree with its chunks' drafted/accepted")
    for base, cands in (
        ("fp32 baseline", ("fp32 ngram k4", "fp32 self-draft k4")),
        ("bf16 baseline", ("bf16 ngram k4",)),
    ):
        for cand in cands:
            div = [
                first_divergence(a, b)
                for a, b in zip(results[base]["tokens"], results[cand]["tokens"], strict=True)
            ]
            results[cand]["first_divergence_vs_baseline"] = div
            if base.startswith("fp32") and any(d is not None for d in div):
                failures.append(f"{cand}: tokens differ from {base} at positions {div}")
            if not results[cand]["drafted"]:
                failures.append(f"{cand}: drafted nothing")
    for res in results.values():
        res["tokens"] = [len(t) for t in res["tokens"]]  # lengths only in the report
    report["arms"] = results
    report["failures"] = failures
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", required=True, help="catalog name, model folder, or a folder with config + tokenizer only"
    )
    parser.add_argument(
        "--device", default="cuda", help="cuda (the check); cpu only to try the script itself"
    )
    parser.add_argument("--out", help="also write the JSON report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = checks_run(model_folder(args.model, Path(tmp)), args.device)
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
