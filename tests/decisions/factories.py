"""Small factories: an experiment with a trace (two requests), a baseline and an n-gram arm,
runs with versions and hardware; and synthetic comparison summaries for the gate."""

from __future__ import annotations

import copy
import hashlib
import itertools
from typing import Any

from console.experiments.models import Arm, Experiment, Run, ServingConfig
from console.traces.models import Trace, TraceRequest

_seq = itertools.count(1)


def config_make(*, name: str, speculative: dict | None, engine_args: dict | None = None) -> ServingConfig:
    n = next(_seq)
    return ServingConfig.objects.create(
        name=name,
        engine="hf",
        target_model="Qwen2.5-Coder-1.5B-Instruct",
        engine_args=engine_args or {"dtype": "float32"},
        speculative_config=speculative,
        content_hash=hashlib.sha256(f"{name}-{n}".encode()).hexdigest(),
    )


def experiment_make(*, created_by=None, candidate_engine_args: dict | None = None) -> Experiment:
    n = next(_seq)
    trace = Trace.objects.create(
        name=f"prod-trace-{n}",
        sha256=hashlib.sha256(f"trace-{n}".encode()).hexdigest(),
        content_sha256=hashlib.sha256(f"content-{n}".encode()).hexdigest(),
        source_format="jsonl",
        request_count=2,
        arrival_spec="trace",
    )
    TraceRequest.objects.create(
        trace=trace,
        position=0,
        request_id="r0",
        arrival_s=0.0,
        prompt="hi",
        max_tokens=32,
        split="train",
        task="chat",
    )
    TraceRequest.objects.create(
        trace=trace,
        position=1,
        request_id="r1",
        arrival_s=0.5,
        prompt="json please",
        max_tokens=64,
        split="holdout",
        task="json",
        response_format={"type": "json_object"},
    )
    exp = Experiment.objects.create(
        name=f"exp-{n}",
        trace=trace,
        target_model="Qwen2.5-Coder-1.5B-Instruct",
        load_levels=[{"label": "1x", "rate_multiplier": 1.0}, {"label": "4x", "rate_multiplier": 4.0}],
        deadlines={"interactive": {"e2e_s": 10}},
        repeats=1,
        created_by=created_by,
        status=Experiment.Status.DONE,
    )
    base = Arm.objects.create(
        experiment=exp,
        config=config_make(name="baseline", speculative=None),
        label="baseline",
        position=0,
        is_baseline=True,
    )
    cand = Arm.objects.create(
        experiment=exp,
        config=config_make(
            name="ngram-k4",
            speculative={"method": "ngram", "num_speculative_tokens": 4},
            engine_args=candidate_engine_args,
        ),
        label="ngram",
        position=1,
    )
    order = itertools.count()
    for arm in (base, cand):
        for load in ("1x", "4x"):
            Run.objects.create(
                experiment=exp,
                arm=arm,
                load_label=load,
                order=next(order),
                status=Run.Status.DONE,
                config_hash=arm.config.content_hash,
                versions={"transformers": "5.17.0", "torch": "2.13.0"},
                hardware={"cpu": "2 cores", "memory_total_bytes": 16 * 2**30},
            )
    return exp


def _row(
    load, metric, stat, base, cand, lo, hi, *, traffic_class=None, floor=None, arm="ngram"
) -> dict[str, Any]:
    return {
        "arm": arm,
        "load": load,
        "traffic_class": traffic_class,
        "metric": metric,
        "stat": stat,
        "base": base,
        "cand": cand,
        "delta": cand - base,
        "delta_lo": lo,
        "delta_hi": hi,
        "ratio": cand / base,
        "ratio_lo": (base + lo) / base,
        "ratio_hi": (base + hi) / base,
        "noise_floor": floor,
    }


def summary_passing() -> dict[str, Any]:
    """A comparison summary on which every gate criterion passes for candidate 'ngram'."""
    rows = []
    for load in ("1x", "4x"):
        rows.append(_row(load, "successes_per_accelerator_hour", "mean", 100.0, 130.0, 10.0, 50.0))
        rows.append(_row(load, "goodput_rps", "mean", 2.0, 2.5, 0.2, 0.8))
        for cls in (None, "interactive"):
            rows.append(
                _row(load, "tpot_s", "p95", 0.050, 0.030, -0.025, -0.015, traffic_class=cls, floor=0.004)
            )
            rows.append(_row(load, "e2e_s", "p95", 4.0, 3.0, -1.4, -0.6, traffic_class=cls, floor=0.3))
            rows.append(_row(load, "e2e_s", "p99", 5.0, 4.0, -1.5, -0.5, traffic_class=cls, floor=0.4))
        rows.append(_row(load, "ttft_s", "p95", 0.30, 0.31, -0.02, 0.04, floor=0.02))
    return {
        "key": "abc123",
        "baseline_arm": "baseline",
        "loads": ["1x", "4x"],
        "comparisons": rows,
        "quality": {
            "exact_expected": True,
            "rates": [
                {"arm": arm, "load": "1x", "task": task, "n_requests": 20}
                for arm in ("baseline", "ngram")
                for task in ("chat", "json", "tool_call")
            ],
            "regressions": [],
        },
        "resources": [
            {"arm": "baseline", "load": "1x", "peak_memory_bytes": 4 * 2**30, "capacity_bytes": 16 * 2**30},
            {"arm": "ngram", "load": "1x", "peak_memory_bytes": 5 * 2**30, "capacity_bytes": 16 * 2**30},
        ],
        "acceptance": [{"arm": "ngram", "task": "chat", "acceptance_rate": 0.6}],
    }


def summary_with(**changes) -> dict[str, Any]:
    out = copy.deepcopy(summary_passing())
    out.update(changes)
    return out
