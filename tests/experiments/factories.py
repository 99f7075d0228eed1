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
    """A prompt the local scripted server answers with a known stream (see tests/support)."""
    return "script:" + json.dumps({"ttft_s": ttft_s, "gap_s": gap_s, "tokens": [1] * tokens})


def scripted_experiment_make(
    *,
    base_url: str,
    prompts: list[str],
    name: str = "flow",
    repeats: int = 1,
    loads: str = "1x",
    warmup: int = 0,
    ks: int | list[int] = 2,
    candidate_args: dict | None = None,
):
    """An experiment on the `openai` engine against the scripted server at ``base_url``:
    a baseline and n-gram candidates (``ks``: one k, or a sweep), ``candidate_args``
    overriding the candidates' engine args (e.g. another server)."""
    from console.experiments.services import experiment_create

    candidate: dict = {"speculative_config": {"method": "ngram", "num_speculative_tokens": ks}}
    if candidate_args:
        candidate["engine_args"] = candidate_args
    return experiment_create(
        name=name,
        trace=trace_make(name=name, prompts=prompts),
        engine="openai",
        target_model="scripted",
        baseline_engine_args={"base_url": base_url, "endpoint": "completions"},
        candidates=[candidate],
        load_levels=loads,
        repeats=repeats,
        warmup=warmup,
    )


def experiment_make(*, trace: Trace, name: str = "x", created_by=None):
    """A stored experiment on ``trace`` through the service that creates experiments (configs,
    arms and its run matrix included): a baseline and one n-gram candidate, one repeat, no warm-up."""
    from console.experiments.services import experiment_create

    return experiment_create(
        name=name,
        trace=trace,
        target_model="smollm2-135m",
        candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
        repeats=1,
        warmup=0,
        created_by=created_by,
    )
