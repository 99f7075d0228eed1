"""Synthetic finished experiments, for the analysis benchmark and page tests.

Not used by any real run: every number here is drawn from a seeded generator and labelled
synthetic in the trace and experiment names, so it can never pass as a measurement.
"""

from __future__ import annotations

import hashlib

import numpy as np
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from console.experiments.services import experiment_create
from console.results.models import RequestResult, RunTelemetry
from console.traces.models import Trace, TraceRequest

TASKS = ("code", "chat", "math", "json", "tool_call")
SYNTHETIC_SERVER = "synthetic-none"


@transaction.atomic
def experiment_synthesize(
    *,
    n_requests: int = 200,
    ks: tuple[int, ...] = (2, 4),
    loads: str = "1x,2x",
    repeats: int = 2,
    seed: int = 0,
    name: str = "synthetic",
):
    """A done experiment with baseline + an n-gram sweep over ``ks``, on the openai engine
    (no model needed). Returns the Experiment."""
    rng = np.random.default_rng(seed)
    trace = Trace.objects.create(
        name=f"{name} (synthetic)",
        sha256=hashlib.sha256(f"{name}-{seed}-{n_requests}".encode()).hexdigest(),
        source_format="synthetic",
        request_count=n_requests,
        arrival_spec="poisson:5",
    )
    arrivals = np.cumsum(rng.exponential(0.2, n_requests))
    TraceRequest.objects.bulk_create(
        [
            TraceRequest(
                trace=trace,
                position=i,
                request_id=f"s{i}",
                arrival_s=float(arrivals[i]),
                prompt=f"synthetic {i}",
                max_tokens=64,
                task=TASKS[i % len(TASKS)],
                traffic_class="interactive" if i % 4 else "batch",
                split="holdout" if i % 3 == 0 else "train",
                prompt_tokens=int(rng.integers(20, 400)),
            )
            for i in range(n_requests)
        ],
        batch_size=5000,
    )
    # No server is ever contacted: the config names a placeholder, registered only while the
    # experiment is defined (an openai config must name a registered server).
    with override_settings(
        SPECREVIEW_OPENAI_SERVERS={SYNTHETIC_SERVER: {"url": "http://127.0.0.1:9/v1", "credential": ""}}
    ):
        experiment = experiment_create(
            name=f"{name} (synthetic)",
            trace=trace,
            engine="openai",
            target_model="synthetic",
            baseline_engine_args={"server": SYNTHETIC_SERVER, "check_server": False},
            candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": list(ks)}}],
            load_levels=loads,
            repeats=repeats,
            cost_per_hour_usd=2.0,
        )
    requests = list(trace.requests.order_by("position"))
    now = timezone.now()
    for run in experiment.runs.select_related("arm__config").order_by("order"):
        spec = run.arm.config.speculative_config
        k = spec["num_speculative_tokens"] if spec else 0
        rows = []
        for tr in requests:
            n_tokens = int(rng.integers(8, 64))
            ttft = float(rng.gamma(2.0, 0.05)) * run.rate_multiplier
            if k:
                accepted_steps, chunk_tokens = [], []
                produced = 0
                while produced < n_tokens:
                    a = int(rng.binomial(k, 0.55 if tr.task != "json" else 0.3))
                    step = min(a + 1, n_tokens - produced)  # the last step is cut at max length
                    accepted_steps.append(a)
                    chunk_tokens.append(step)
                    produced += step
                drafted = [k] * len(accepted_steps)
                gap = 0.05 + 0.01 * k
            else:
                accepted_steps, drafted, chunk_tokens = [], [], [1] * n_tokens
                gap = 0.05
            first = tr.arrival_s / run.rate_multiplier + ttft
            times = list(first + np.cumsum(np.r_[0.0, rng.gamma(4.0, gap / 4, len(chunk_tokens) - 1)]))
            rows.append(
                RequestResult(
                    run=run,
                    trace_request=tr,
                    request_id=tr.request_id,
                    scheduled_s=tr.arrival_s / run.rate_multiplier,
                    sent_s=tr.arrival_s / run.rate_multiplier,
                    first_token_s=times[0],
                    finish_s=times[-1],
                    chunk_times=times,
                    chunk_tokens=chunk_tokens,
                    num_output_tokens=n_tokens,
                    output_token_ids=list(range(n_tokens)),
                    output_text="x" * n_tokens,
                    finish_reason="length",
                    drafted=drafted,
                    accepted=accepted_steps,
                )
            )
        RequestResult.objects.bulk_create(rows, batch_size=5000)
        RunTelemetry.objects.create(run=run, peak_memory_bytes=int(2e9 + 1e8 * k), counters={})
        run.status = "done"
        run.started_at = now
        run.finished_at = now
        run.wall_s = max(float(r.finish_s or 0.0) for r in rows)
        run.progress_done = run.progress_total = len(rows)
        run.save()
    experiment.status = "done"
    experiment.started_at = experiment.finished_at = now
    experiment.save()
    return experiment
