"""What the demo runs, and as whom: the default plan (sized for 15 minutes), ``--full``, the
testing options that cut either down, and the demo's users."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

DEMO_USERS = (("demo", "approver"), ("demo-engineer", "engineer"), ("demo-viewer", "viewer"))
DEMO_PASSWORD = "specreview-demo"
# The demo's team: its three users are its members, and it owns the demo trace and all made from it.
DEMO_TEAM = "demo"

# The default demo fits 15 minutes on a 2-core AVX2 laptop without native bf16, install and
# model fetch included (README.md has the measured figure): the smallest target, its number
# format chosen by the hf engine's dtype "auto" (fp32 where the CPU lacks native bf16, from a
# probe cached per host and model), baseline vs n-gram k = 2 and 4, every request of the demo
# trace (train and holdout, so a slice policy can be fitted and scored), two repeats (a noise
# floor) at one load level: 2x the trace's arrival rate keeps the engine busy most of the window
# without queueing minutes of backlog.
DEFAULT: dict[str, Any] = {
    "target": "smollm2-135m",
    "draft": None,
    "engine_args": {"dtype": "auto"},
    "split": "all",
    # The first 20 requests of the demo trace (HumanEval, GSM8K, JSON-schema, tool calls, chat,
    # translation; 8 train, 12 holdout): their arrivals span 72 s, about what SmolLM2 needs to serve
    # them at 16 tokens on 2 quiet cores, so at 2x the engine is near saturation.
    "requests": 20,
    "output_limit": 16,
    "repeats": 2,
    "loads": "2x",
    "ngram_k": [2, 4],
}
# --full: the Qwen2.5-Coder pair (a real target and draft: same tokenizer) with a draft-model arm.
# Not sized for 15 minutes: the 1.5B target decodes about 10x slower than SmolLM2-135M here.
FULL: dict[str, Any] = {
    "target": "qwen2.5-coder-1.5b",
    "draft": "qwen2.5-coder-0.5b",
    "engine_args": {"dtype": "auto"},
    "split": "all",
    "requests": None,
    "output_limit": 32,
    "repeats": 2,
    "loads": "2x",
    "ngram_k": [2, 4],
}


def plan_build(
    *,
    full: bool,
    limit_requests: int | None,
    output_limit: int | None,
    repeats: int | None,
    loads: str | None,
    ngram_k: str | None,
) -> dict[str, Any]:
    """The plan: ``FULL`` or ``DEFAULT`` with the testing options (hidden flags that keep the
    demo's runs short) laid over it. Raises CommandError naming a flag with a bad value."""
    plan = dict(FULL if full else DEFAULT)
    for flag, value in (("--limit-requests", limit_requests), ("--output-limit", output_limit), ("--repeats", repeats)):
        if value is not None and value < 1:
            raise CommandError(f"{flag}: expected a positive number, got {value}")
    if output_limit:
        plan["output_limit"] = output_limit
    if repeats:
        plan["repeats"] = repeats
    if loads:
        plan["loads"] = loads
    if ngram_k:
        try:
            plan["ngram_k"] = [int(k) for k in ngram_k.split(",")]
        except ValueError:
            raise CommandError(f"--ngram-k: expected numbers like 2,4, got {ngram_k!r}") from None
    return plan


def plan_candidates(plan: dict) -> list[dict]:
    """The candidates: an n-gram sweep over the plan's draft lengths, and a draft-model arm when
    the plan has a draft."""
    candidates = [
        {
            "speculative_config": {
                "method": "ngram",
                "num_speculative_tokens": plan["ngram_k"],
                "prompt_lookup_max": 3,
            }
        }
    ]
    if plan["draft"]:
        candidates.append(
            {
                "speculative_config": {
                    "method": "draft_model",
                    "model": plan["draft"],
                    "num_speculative_tokens": 4,
                }
            }
        )
    return candidates
