"""Small builders for traces and experiments in experiment tests (no parser involved)."""

from __future__ import annotations

import hashlib
import json

from console.traces.models import Trace, TraceRequest


def trace_make(
    *,
    name: str = "t",
    prompts: list[str],
    arrivals: list[float] | None = None,
    max_tokens: int = 16,
    tasks: list[str] | None = None,
    holdout_every: int = 3,
) -> Trace:
    arrivals = arrivals or [i * 0.1 for i in range(len(prompts))]
    payload = json.dumps([prompts, arrivals, max_tokens]).encode()
    trace = Trace.objects.create(
        name=name,
        sha256=hashlib.sha256(payload).hexdigest(),
        source_format="native",
        request_count=len(prompts),
        arrival_spec="trace",
    )
    TraceRequest.objects.bulk_create(
        TraceRequest(
            trace=trace,
            position=i,
            request_id=f"r{i}",
            arrival_s=arrivals[i],
            prompt=p,
            max_tokens=max_tokens,
            task=(tasks[i] if tasks else "chat"),
            traffic_class="interactive",
            split="holdout" if i % holdout_every == 0 else "train",
            prompt_tokens=len(p) // 4,
        )
        for i, p in enumerate(prompts)
    )
    return trace


def script_prompt(*, ttft_s: float = 0.02, gap_s: float = 0.02, tokens: int = 5) -> str:
    """A prompt the local scripted server answers with a known stream (see workers/testing)."""
    return "script:" + json.dumps({"ttft_s": ttft_s, "gap_s": gap_s, "tokens": [1] * tokens})
