"""What a decision reads from the database as evidence: trace, configs, versions, hardware, runs.
The checklist and the bundle take it from here (``selectors.decision_evidence`` is this one)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.experiments.models import Arm, Experiment
from workers.engines.redaction import config_redact


def config_export(config: Any) -> dict[str, Any]:
    """A ServingConfig as a plain dict, the form the rollback plan and the bundle carry; a key a
    config stored before configs were validated is ``[redacted]`` (``content_hash`` is the
    stored row's)."""
    return {
        "name": config.name,
        "engine": config.engine,
        "target_model": config.target_model,
        "engine_args": config_redact(config.engine_args),
        "speculative_config": config_redact(config.speculative_config),
        "content_hash": config.content_hash,
    }


def experiment_baseline_arm(*, experiment: Experiment) -> Arm | None:
    return experiment.arms.select_related("config").filter(is_baseline=True).first()


def decision_evidence(
    *, experiment: Experiment, candidate_arm: Arm | None, facts: Mapping[str, Any]
) -> dict[str, Any]:
    """What the checklist and the bundle read from the database: trace, configs, versions,
    hardware, request counts with structured output or tools."""
    trace = experiment.trace
    baseline = experiment_baseline_arm(experiment=experiment)
    runs = list(experiment.runs.select_related("arm").order_by("order"))
    versions: dict[str, dict[str, str]] = {}
    hardware: dict[str, Any] = {}
    for run in runs:
        if run.versions:
            versions.setdefault(run.arm.label, {}).update({str(k): str(v) for k, v in run.versions.items()})
        if run.hardware:
            hardware.setdefault(run.arm.label, run.hardware)
    requests = trace.requests.all()
    return {
        "experiment": {
            "id": experiment.pk,
            "name": experiment.name,
            "split": experiment.split,
            "engine": experiment.engine,
            "target_model": experiment.target_model,
            "load_levels": experiment.load_levels,
            "deadlines": experiment.deadlines,
            "sampling": experiment.sampling,
            "repeats": experiment.repeats,
            "cost_per_hour_usd": experiment.cost_per_hour_usd,
            "hardware_label": experiment.hardware_label,
        },
        "trace": {
            "id": trace.pk,
            "name": trace.name,
            "sha256": trace.sha256,
            "content_sha256": trace.content_sha256,
            "request_count": trace.request_count,
            "paired_with": trace.paired_with,
            "arrival_spec": trace.arrival_spec,
            "source_format": trace.source_format,
        },
        "baseline": config_export(baseline.config) if baseline else {},
        "candidate": config_export(candidate_arm.config) if candidate_arm else {},
        "configs": [
            {"arm": arm.label, "is_baseline": arm.is_baseline} | config_export(arm.config)
            for arm in experiment.arms.select_related("config").order_by("position")
        ],
        "runs": [
            {
                "id": run.pk,
                "arm": run.arm.label,
                "load": run.load_label,
                "repeat": run.repeat,
                "status": run.status,
                "config_hash": run.config_hash,
                "versions": run.versions,
                "hardware": run.hardware,
            }
            for run in runs
        ],
        "versions": versions,
        "hardware": hardware,
        "experiment_sampling": experiment.sampling,
        "structured": {
            "response_format": requests.filter(response_format__isnull=False).count(),
            "tools": requests.filter(tools__isnull=False).count(),
        },
        "stats_reported": list(facts.get("stats_reported") or []),
        "acceptance_by_task": bool(facts.get("acceptance_by_task")),
        "facts": dict(facts),
    }
