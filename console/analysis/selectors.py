"""Reads for analysis: results as the DataFrames the pure metric code takes, and the cached
comparison of an experiment."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pandas as pd

from console.analysis.models import ComparisonCache, RequestResult, RunTelemetry
from console.experiments.models import Experiment, Run

# RequestResult fields (or trace_request__ lookups) -> analysis contract column.
RESULT_FIELDS = {
    "id": "result_id",
    "run_id": "run_id",
    "request_id": "request_id",
    "trace_request__task": "task",
    "trace_request__traffic_class": "traffic_class",
    "trace_request__prompt_tokens": "prompt_tokens",
    "trace_request__max_tokens": "max_tokens",
    "scheduled_s": "scheduled_s",
    "sent_s": "sent_s",
    "first_token_s": "first_token_s",
    "finish_s": "finish_s",
    "queue_s": "queue_s",
    "chunk_times": "chunk_times",
    "chunk_tokens": "chunk_tokens",
    "num_output_tokens": "num_output_tokens",
    "output_token_ids": "output_token_ids",
    "output_text": "output_text",
    "finish_reason": "finish_reason",
    "error": "error",
    "drafted": "drafted",
    "accepted": "accepted",
    "trace_request__response_format": "response_format",
    "trace_request__tools": "tools",
    "json_valid": "json_valid",
    "schema_valid": "schema_valid",
    "tool_call_valid": "tool_call_valid",
}
RUN_LEVEL = ("arm", "is_baseline", "load", "rate_multiplier", "repeat")
REQUEST_COLUMNS = ["run_id", *RUN_LEVEL, *[c for c in RESULT_FIELDS.values() if c != "run_id"]]
RUN_COLUMNS = [
    "run_id",
    "arm",
    "load",
    "repeat",
    "wall_s",
    "peak_memory_bytes",
    "mean_util",
    "energy_j",
    "accelerator_count",
]


def _nan(value) -> float:
    return float("nan") if value is None else float(value)


def results_frames(*, runs: list[Run]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per request per run, and one row per run, in the analysis input contract.

    Times are seconds from each run's replay start; failed requests keep NaN first-token and
    finish times and a non-empty ``error``.
    """
    run_by_id = {r.pk: r for r in runs}
    records = RequestResult.objects.filter(run_id__in=list(run_by_id)).values_list(*RESULT_FIELDS)
    frame = pd.DataFrame.from_records(
        list(records.iterator(chunk_size=5000)), columns=list(RESULT_FIELDS.values())
    )
    for column in ("sent_s", "first_token_s", "finish_s"):
        frame[column] = frame[column].astype(float)  # None -> NaN for failed requests
    frame["prompt_tokens"] = frame["prompt_tokens"].fillna(0).astype(int)
    frame["error"] = frame["error"].where(frame["error"].astype(bool), None)
    frame["output_text"] = frame["output_text"].fillna("")
    run_level = {
        "arm": {pk: r.arm.label for pk, r in run_by_id.items()},
        "is_baseline": {pk: r.arm.is_baseline for pk, r in run_by_id.items()},
        "load": {pk: r.load_label for pk, r in run_by_id.items()},
        "rate_multiplier": {pk: r.rate_multiplier for pk, r in run_by_id.items()},
        "repeat": {pk: r.repeat for pk, r in run_by_id.items()},
    }
    for column, mapping in run_level.items():
        frame[column] = frame["run_id"].map(mapping)
    requests = frame[REQUEST_COLUMNS]
    telemetry = {t.run_id: t for t in RunTelemetry.objects.filter(run_id__in=list(run_by_id))}
    run_rows = []
    for run in runs:
        t = telemetry.get(run.pk)
        gpus = len((run.hardware or {}).get("gpus") or []) or 1
        peak = None
        if t is not None:
            peak = t.gpu_peak_memory_bytes if t.gpu_peak_memory_bytes else t.peak_memory_bytes
        run_rows.append(
            (
                run.pk,
                run.arm.label,
                run.load_label,
                run.repeat,
                _nan(run.wall_s),
                _nan(peak),
                _nan(t.mean_util if t else None),
                _nan(t.energy_j if t else None),
                gpus if run.queue == "gpu" else 1,
            )
        )
    return requests, pd.DataFrame.from_records(run_rows, columns=RUN_COLUMNS)


def experiment_finished_runs(*, experiment: Experiment) -> list[Run]:
    return list(
        Run.objects.filter(experiment=experiment, status=Run.Status.DONE)
        .select_related("arm")
        .order_by("order")
    )


def _cache_key(experiment: Experiment, runs: list[Run], version: int) -> str:
    ident = [(r.pk, r.attempt, r.finished_at.isoformat() if r.finished_at else None) for r in runs]
    params = [experiment.deadlines, experiment.cost_per_hour_usd, experiment.power_price_usd_per_kwh, version]
    return hashlib.sha256(json.dumps([ident, params], default=str).encode()).hexdigest()


COMPARISON_VERSION = 1


def comparison_for_experiment(*, experiment: Experiment, n_boot: int = 1000) -> dict | None:
    """The experiment's comparison summary, computed once per set of finished runs and cached.

    None when no baseline run has finished yet.
    """
    runs = experiment_finished_runs(experiment=experiment)
    if not any(r.arm.is_baseline for r in runs):
        return None
    key = _cache_key(experiment, runs, COMPARISON_VERSION)
    cached = ComparisonCache.objects.filter(experiment=experiment).first()
    if cached is not None and cached.key == key:
        return cached.data
    data = comparison_compute_for(experiment=experiment, runs=runs, n_boot=n_boot)
    ComparisonCache.objects.update_or_create(experiment=experiment, defaults={"key": key, "data": data})
    return data


def comparison_compute_for(*, experiment: Experiment, runs: list[Run], n_boot: int = 1000) -> dict:
    from console.analysis.stats import comparison_compute

    requests, run_frame = results_frames(runs=runs)
    arms = list(experiment.arms.select_related("config"))
    baseline = next(a.label for a in arms if a.is_baseline)
    summary = comparison_compute(
        requests,
        run_frame,
        deadlines=experiment.deadlines,
        cost_per_hour_usd=experiment.cost_per_hour_usd,
        power_price_usd_per_kwh=experiment.power_price_usd_per_kwh,
        baseline_arm=baseline,
        sweeps=experiment_sweeps(arms=arms),
        n_boot=n_boot,
    )
    summary["cdf"] = latency_cdf_points(requests, deadlines=experiment.deadlines)
    summary["arm_order"] = [a.label for a in sorted(arms, key=lambda a: a.position)]
    summary["load_order"] = [lv["label"] for lv in experiment.load_levels]
    return json_safe(summary)


CDF_POINTS = 101


def latency_cdf_points(requests: pd.DataFrame, *, deadlines: dict) -> dict[str, list[dict]]:
    """Quantiles (0..100 %) of TTFT, TPOT and e2e per arm x load, enough to draw CDFs without
    keeping every request on the page. Seconds."""
    from console.analysis.metrics import requests_derive

    if requests.empty:
        return {}
    derived = requests_derive(requests, deadlines=deadlines)
    qs = np.linspace(0, 1, CDF_POINTS)
    out: dict[str, list[dict]] = {}
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        series = []
        for (arm, load), group in derived.groupby(["arm", "load"], sort=False):
            values = group[metric].dropna().to_numpy(dtype=float)
            if values.size:
                series.append(
                    {"arm": arm, "load": load, "x": np.quantile(values, qs).tolist(), "y": qs.tolist()}
                )
        out[metric] = series
    return out


def experiment_sweeps(*, arms) -> dict[str, dict[str, int]]:
    """Candidate arms that differ only in draft length, grouped: ``{sweep: {arm: k}}``."""
    groups: dict[str, dict[str, int]] = {}
    for arm in arms:
        spec = arm.config.speculative_config
        if not spec or not isinstance(spec.get("num_speculative_tokens"), int):
            continue
        rest = {k: v for k, v in spec.items() if k != "num_speculative_tokens"}
        name = spec.get("method", "?") + (f"({spec['model']})" if spec.get("model") else "")
        key = name + " " + json.dumps(rest, sort_keys=True)
        groups.setdefault(key, {})[arm.label] = spec["num_speculative_tokens"]
    return {key.split(" ", 1)[0]: members for key, members in groups.items() if len(members) >= 2}


def json_safe(value):
    """Replace NaN/inf (not valid JSON) by None, recursively, and numpy scalars by Python ones."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
