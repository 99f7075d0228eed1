"""Small factories: an experiment with a trace (two requests), a baseline and an n-gram arm,
runs with versions and hardware; and synthetic comparison summaries for the gate: built as the
dicts the tests edit (only the fields the gate reads), read as the typed summary the gate takes
through :func:`summary_make`."""

from __future__ import annotations

import hashlib
import itertools
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from console.analysis.comparison.schema import Summary, summary_load
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
                hardware={"cpu_count": 2, "memory_bytes": 16 * 2**30, "gpus": []},
            )
    return exp


def _delta(metric, stat, base, cand, lo, hi, *, floor=None, p=0.001, role="exploratory") -> dict[str, Any]:
    higher = metric in ("success", "met_deadline")
    significant = not (lo <= 0 <= hi)
    beyond = floor is not None and abs(cand - base) > floor
    direction = "better" if (cand - base > 0) == higher else "worse"
    return {
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
        "p_value": p,
        "p_holm": p * 2 if role == "primary" else None,
        "n_pairs": 80,
        "n_requests": 40,
        "n_excluded": 0,
        "mc_error_rel": 0.005,
        "method": "studentized" if stat == "mean" else "percentile",
        "measured": True,
        "reason": None,
        "noise_floor": floor,
        "verdict": direction if significant and beyond else "not distinguishable",
        "role": role,
    }


def _deltas(*, promised: bool = False) -> list[dict[str, Any]]:
    primary = "primary" if promised else "exploratory"
    return [
        _delta("success", "mean", 0.90, 0.95, 0.01, 0.09, floor=0.01, role=primary),
        _delta("met_deadline", "mean", 0.92, 0.96, 0.01, 0.07, floor=0.01),
        _delta("tpot_s", "mean", 0.040, 0.025, -0.018, -0.012, floor=0.003),
        _delta("tpot_s", "p95", 0.050, 0.030, -0.025, -0.015, floor=0.004, role=primary),
        _delta("e2e_s", "p95", 4.0, 3.0, -1.4, -0.6, floor=0.3),
        _delta("e2e_s", "p99", 5.0, 4.0, -1.5, -0.5, floor=0.4),
        _delta("ttft_s", "p95", 0.30, 0.31, -0.02, 0.04, floor=0.02, p=0.4),
    ]


ENDPOINTS = {
    "promised_class": "interactive",
    "primary_metric": "tpot_s",
    "primary_stat": "p95",
    "success_metric": "success",
    "success_stat": "mean",
    "alpha": 0.05,
    "knee_margin_s": 0.0,
}


def summary_passing() -> dict[str, Any]:
    """A comparison summary in ``console.analysis.comparison`` schema version 2 (only the fields
    the gate reads; :func:`summary_make` reads it as the typed summary) on which every gate
    criterion passes for candidate 'ngram': two loads, two repeats (a noise floor), a stable
    baseline, complete quality counts."""
    headline, runs, slices, counts, floors = [], [], [], [], []
    for load in ("1x", "4x"):
        for arm, peak in (("baseline", 4 * 2**30), ("ngram", 5 * 2**30)):
            headline.append(
                {
                    "arm": arm,
                    "load": load,
                    "is_baseline": arm == "baseline",
                    "n_requests": 40,
                    "peak_memory_bytes": peak,
                    "e2e_s_p95": 3.0,
                    "e2e_s_p99": 4.0,
                    "tpot_s_p95": 0.03,
                    "acceptance_rate": None if arm == "baseline" else (0.6 if load == "1x" else 0.55),
                    "acceptance_rate_lo": None if arm == "baseline" else (0.56 if load == "1x" else 0.4987),
                    "acceptance_rate_hi": None if arm == "baseline" else (0.64 if load == "1x" else 0.6),
                    "deltas": _deltas() if arm == "ngram" else [],
                }
            )
            for repeat, successes in enumerate((100.0, 104.0) if arm == "baseline" else (130.0, 134.0)):
                runs.append(
                    {"arm": arm, "load": load, "repeat": repeat, "successes": successes, "accelerator_hours": 1.0}
                )
            slices.append(
                {
                    "dimension": "traffic_class",
                    "value": "interactive",
                    "arm": arm,
                    "load": load,
                    "n_requests": 40,
                    "deltas": _deltas(promised=True) if arm == "ngram" else [],
                }
            )
        for task, checks in (("chat", ()), ("json", ("json_valid", "schema_valid")), ("tool_call", ("tool_valid",))):
            for check in (*checks, "exact_match"):
                counts.append(
                    {
                        "arm": "ngram",
                        "load": load,
                        "task": task,
                        "check": check,
                        "n_applicable": 10,
                        "base_valid": 10,
                        "cand_valid": 10,
                        "regressions": 0,
                        "improvements": 0,
                        "mcnemar_p": None,
                        "baseline_flip_rate": 0.0,
                    }
                )
        floors.append(
            {"load": load, "dimension": None, "value": None, "metric": "tpot_s", "stat": "p95", "n_repeats": 2,
             "n_repeat_pairs": 1, "noise_floor": 0.004, "noise_floor_rel": 0.08, "p_value_min": None}
        )
    return {
        "schema_version": 2,
        "baseline_arm": "baseline",
        "load_order": ["1x", "4x"],
        "endpoints": dict(ENDPOINTS),
        "headline": headline,
        "runs": runs,
        "cost_basis": "busy_time",
        "slices": slices,
        "acceptance": {"by_task": [{"arm": "ngram", "load": "1x", "task": "chat", "acceptance_rate": 0.6}]},
        "quality": {"counts": counts, "regressions": [], "n_regressions": 0, "truncated": False, "divergence": []},
        "noise_floor": floors,
        "baseline_stability": {"stable": True, "alpha": 0.05, "tests": [], "flagged": [], "message": None},
    }


def quality_edit(summary: dict[str, Any], *, task: str, check: str, load: str = "1x", arm: str = "ngram", **values) -> None:
    """Change the complete quality counts of one candidate arm x load x task x check."""
    for r in summary["quality"]["counts"]:
        if (r["arm"], r["load"], r["task"], r["check"]) == (arm, load, task, check):
            r.update(values)
            return
    summary["quality"]["counts"].append(
        {"arm": arm, "load": load, "task": task, "check": check, "n_applicable": 10, "base_valid": 10,
         "cand_valid": 10, "regressions": 0, "improvements": 0, "mcnemar_p": None, "baseline_flip_rate": 0.0}
        | values
    )


def regression(task: str, checks: str, *, arm: str = "ngram", load: str = "1x") -> dict[str, Any]:
    return {"arm": arm, "load": load, "request_id": f"{task}-1", "repeat": 0, "task": task, "checks": checks}


# --- the hand-built dicts as the typed summary -----------------------------------------------


def summary_make(partial: Mapping[str, Any]) -> Summary:
    """``partial`` (a hand-built summary naming only what a test is about) as the typed summary:
    every field it leaves out, at any depth, gets a neutral value (None where the schema allows
    it, else 0, "", False, empty), so what the gate reads is what the test wrote. A field that
    can only be one of several named values (a verdict, ``cost_basis``) has no neutral value: the
    test must say it. ``partial`` is not changed."""
    return summary_load(_complete(Summary, partial))


def _complete(model: type[BaseModel], data: Mapping[str, Any]) -> dict[str, Any]:
    fields = model.model_fields
    # A key the model does not know is kept: validation then refuses it (a typo fails loudly).
    out = {name: _filled(fields[name].annotation, value) if name in fields else value for name, value in data.items()}
    for name, field in fields.items():
        if name not in out and field.is_required():
            out[name] = _neutral(field.annotation, where=f"{model.__name__}.{name}")
    return out


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _filled(annotation: Any, value: Any) -> Any:
    """``value`` with the records inside it completed (a record, an optional one, a tuple of them)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return value if value is None or len(inner) != 1 else _filled(inner[0], value)
    if (model := _model_in(annotation)) and isinstance(value, Mapping):
        return _complete(model, value)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and isinstance(value, list | tuple):
        return [_filled(args[0], v) for v in value]
    return value


def _neutral(annotation: Any, *, where: str) -> Any:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType) and type(None) in args:
        return None
    if origin is tuple:
        return []
    if origin is dict:
        return {}
    if origin is Literal:
        if len(args) == 1:
            return args[0]
        raise ValueError(f"{where}: no neutral value among {args}: give it")
    if model := _model_in(annotation):
        return _complete(model, {})
    neutral = {bool: False, int: 0, float: 0.0, str: ""}
    if annotation in neutral:
        return neutral[annotation]
    raise ValueError(f"{where}: no neutral value for {annotation!r}")
