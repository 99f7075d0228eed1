"""Greedy fp32 speculation on the hf engine is lossless: candidates reproduce the baseline token for token.

Real prompts from ../shared/data (code, math, chat, translation). A mismatch fails the test
unless, at the first divergence, the baseline's two top logits lie within float32 rounding
of each other (a verification pass computes logits in a different batch shape than plain
decoding, so an exact tie may break either way); the gap is reported either way.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from workers.engines.base import EngineConfig, EngineRequest
from workers.engines.hf import HFEngine

pytestmark = pytest.mark.model

# float32 has a 24-bit significand (eps 1.2e-7); logits come out of long accumulations whose
# order differs between batch shapes, so allow a few hundred ulps of the logit's magnitude.
FP32_TIE = 2e-5


def real_prompts(shared_data: Path, per_task: int) -> list[EngineRequest]:
    """``per_task`` prompts each of humaneval (raw code), gsm8k (chat), vicuna (chat), wmt14 en-de (chat)."""
    data = shared_data / "prompts"
    humaneval = [json.loads(x)["prompt"] for x in (data / "humaneval/HumanEval.jsonl").open()][:per_task]
    gsm8k = [json.loads(x)["question"] for x in (data / "gsm8k/test.first300_filtered.jsonl").open()][
        :per_task
    ]
    vicuna = [json.loads(x)["turns"][0] for x in (data / "vicuna_bench/question.jsonl").open()][:per_task]
    wmt = json.loads((data / "wmt14_en_de/wmt_ende.json").read_text())[:per_task]
    requests = [
        EngineRequest(request_id=f"humaneval-{i}", max_tokens=0, prompt=p) for i, p in enumerate(humaneval)
    ]
    for task, texts in (("gsm8k", gsm8k), ("vicuna", vicuna), ("wmt", wmt)):
        requests += [
            EngineRequest(request_id=f"{task}-{i}", max_tokens=0, messages=[{"role": "user", "content": t}])
            for i, t in enumerate(texts)
        ]
    return requests


def _ids(engine: HFEngine, request: EngineRequest) -> tuple[list[int], list]:
    async def go():
        return [c async for c in engine.stream(request)]

    chunks = asyncio.run(go())
    return [t for c in chunks for t in c.token_ids], chunks


def _top2_gap(engine: HFEngine, request: EngineRequest, prefix: list[int]) -> tuple[float, float, int, int]:
    """(gap, top logit, top id, runner-up id) of the baseline's next-token logits after ``prefix``."""
    import torch

    ids = torch.cat([engine.encode(request), torch.tensor([prefix], dtype=torch.long)], dim=1)
    with torch.inference_mode():
        logits = engine._model(ids).logits[0, -1].float()
    top = torch.topk(logits, 2)
    return (
        float(top.values[0] - top.values[1]),
        float(top.values[0]),
        int(top.indices[0]),
        int(top.indices[1]),
    )


def assert_same_or_tie(
    baseline: HFEngine, request: EngineRequest, expected: list[int], got: list[int], report: list
):
    if got == expected:
        return
    i = next(
        (j for j, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
        min(len(expected), len(got)),
    )
    gap, top, first, second = _top2_gap(baseline, request, expected[:i])
    line = (
        f"{request.request_id}: first divergence at token {i}: baseline {expected[i : i + 1]} vs candidate "
        f"{got[i : i + 1]}; baseline top-2 {first}/{second}, logit gap {gap:.3e} (top logit {top:.3f})"
    )
    report.append(line)
    print(line)
    tie = gap <= FP32_TIE * max(1.0, abs(top)) and i < len(got) and got[i] in (first, second)
    assert tie, "not a float32 near-tie, so a real bug: " + line


def _engine(target: str, spec=None) -> HFEngine:
    engine = HFEngine()
    engine.start(
        EngineConfig(
            engine="hf", target_model=target, engine_args={"dtype": "float32"}, speculative_config=spec
        )
    )
    return engine


def _compare(target, spec, requests, max_tokens, *, baseline=None):
    import dataclasses

    own = baseline is None
    baseline = baseline or _engine(target)
    candidate = _engine(target, spec)
    report: list[str] = []
    try:
        for request in requests:
            request = dataclasses.replace(request, max_tokens=max_tokens)
            expected, _ = _ids(baseline, request)
            got, chunks = _ids(candidate, request)
            assert sum(c.accepted + 1 for c in chunks) == len(got)
            assert_same_or_tie(baseline, request, expected, got, report)
        counters = candidate.counters()
        assert counters["seam_mismatches"] == 0
        return counters, report
    finally:
        candidate.stop()
        if own:
            baseline.stop()


@pytest.fixture(scope="module")
def smol_baseline():
    engine = _engine("smollm2-135m")
    yield engine
    engine.stop()


def test_it_reproduces_the_baseline_with_ngram_on_20_real_prompts(shared_data, smol_baseline):
    requests = real_prompts(shared_data, per_task=5)
    assert len(requests) == 20
    spec = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    counters, report = _compare("smollm2-135m", spec, requests, 32, baseline=smol_baseline)
    assert counters["requests"] == 20
    assert counters["spec_decode_num_accepted_tokens"] > 0, (
        "prompt lookup on code and translation must accept something"
    )


def test_it_reproduces_the_baseline_with_a_draft_model(shared_data, smol_baseline):
    # smollm2 drafting for itself: same tokenizer, every draft token verified by the target.
    requests = real_prompts(shared_data, per_task=1)
    spec = {"method": "draft_model", "model": "smollm2-135m", "num_speculative_tokens": 4}
    counters, _ = _compare("smollm2-135m", spec, requests, 24, baseline=smol_baseline)
    assert counters["spec_decode_num_accepted_tokens"] > 0


@pytest.mark.parametrize("schedule", ["heuristic", "dynamic"])
def test_it_reproduces_the_baseline_with_adaptive_draft_lengths(shared_data, smol_baseline, schedule):
    requests = real_prompts(shared_data, per_task=1)[:2]
    spec = {
        "method": "draft_model",
        "model": "smollm2-135m",
        "num_speculative_tokens": 3,
        "draft_length_schedule": schedule,
    }
    counters, _ = _compare("smollm2-135m", spec, requests, 20, baseline=smol_baseline)
    assert counters["spec_decode_num_draft_tokens"] > 0


@pytest.mark.slow
def test_it_reproduces_the_qwen_coder_target_with_its_0_5b_draft(shared_data):
    requests = [
        r
        for r in real_prompts(shared_data, per_task=1)
        if r.request_id in {"humaneval-0", "gsm8k-0", "wmt-0"}
    ]
    spec = {"method": "draft_model", "model": "qwen2.5-coder-0.5b", "num_speculative_tokens": 4}
    counters, _ = _compare("qwen2.5-coder-1.5b", spec, requests, 24)
    assert counters["spec_decode_num_accepted_tokens"] > 0


@pytest.mark.slow
def test_it_reproduces_the_baseline_with_a_draft_of_another_tokenizer(shared_data):
    # Universal assisted generation: smollm2 (49k vocab) drafting for qwen2.5-coder-0.5b (152k).
    requests = [r for r in real_prompts(shared_data, per_task=1) if r.request_id in {"humaneval-0", "wmt-0"}]
    spec = {"method": "draft_model", "model": "smollm2-135m", "num_speculative_tokens": 3}
    counters, _ = _compare("qwen2.5-coder-0.5b", spec, requests, 16)
    assert counters["spec_decode_num_draft_tokens"] > 0
