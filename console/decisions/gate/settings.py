"""Gate settings per decision: validated as typed (:func:`gate_settings_validate`), resolved over
``DEFAULT_SETTINGS`` and listed where they deviate from it (see the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from console.decisions.gate.common import finite
from console.decisions.gate.constants import (
    DEFAULT_SETTINGS,
    LATENCY_METRICS,
    MAX_CAPACITY_BYTES,
    MAX_SUCCESS_MARGIN,
    STABILITY_METRIC_NAMES,
    STAT_NAMES,
)


class GateSettingsError(ValueError):
    """Invalid gate settings: ``errors`` lists one message per field."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def _metric_stat_list(value: Any, *, field: str, metrics: Sequence[str], errors: list[str]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        errors.append(f"{field}: a list of 'metric:stat' strings")
        return []
    out = []
    for v in value:
        metric, _, stat = v.partition(":")
        if metric not in metrics or stat not in STAT_NAMES:
            errors.append(
                f"{field}: {v!r} is not 'metric:stat' with metric in {', '.join(metrics)} and stat in "
                f"{', '.join(STAT_NAMES)}"
            )
        else:
            out.append(v)
    if len(set(out)) != len(out):
        errors.append(f"{field}: duplicates")
    return out


def gate_settings_validate(settings: Mapping[str, Any] | None, *, loads: Sequence[str] | None = None) -> dict[str, Any]:
    """The settings a user typed, checked: known keys only, known metric names, weights >= 0,
    thresholds and fractions within bounds, loads among ``loads`` (when given). Returns them
    normalised (only the keys given); raises :class:`GateSettingsError` listing every problem."""
    errors: list[str] = []
    if settings is None:
        return {}
    if not isinstance(settings, Mapping):
        raise GateSettingsError(["gate settings: a JSON object"])
    out: dict[str, Any] = {}
    known_loads = [str(x) for x in loads] if loads is not None else None
    for key, value in settings.items():
        if key not in DEFAULT_SETTINGS:
            errors.append(f"{key}: unknown gate setting (known: {', '.join(DEFAULT_SETTINGS)})")
            continue
        if key == "success_margin":
            if not finite(value) or not 0 <= float(value) <= MAX_SUCCESS_MARGIN:
                errors.append(f"success_margin: a fraction between 0 and {MAX_SUCCESS_MARGIN}")
            else:
                out[key] = float(value)
        elif key == "load_weights":
            if not isinstance(value, Mapping):
                errors.append("load_weights: an object {load: weight}")
                continue
            weights = {}
            for load, w in value.items():
                if known_loads is not None and str(load) not in known_loads:
                    errors.append(f"load_weights: unknown load {load!r} (the experiment has {', '.join(known_loads)})")
                elif not finite(w) or not 0 <= float(w) <= 1e6:
                    errors.append(f"load_weights.{load}: a number between 0 and 1e6")
                else:
                    weights[str(load)] = float(w)
            if weights and sum(weights.values()) <= 0:
                errors.append("load_weights: weights sum to zero")
            out[key] = weights
        elif key == "loads_in_scope":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                errors.append("loads_in_scope: a list of load labels")
                continue
            unknown = [v for v in value if known_loads is not None and v not in known_loads]
            if unknown:
                errors.append(f"loads_in_scope: unknown load {', '.join(unknown)} (the experiment has {', '.join(known_loads or [])})")
            out[key] = list(dict.fromkeys(value))
        elif key == "guard_latency_metrics":
            out[key] = _metric_stat_list(value, field=key, metrics=LATENCY_METRICS, errors=errors)
        elif key == "stability_metrics":
            out[key] = _metric_stat_list(value, field=key, metrics=STABILITY_METRIC_NAMES, errors=errors)
            if isinstance(value, list) and not value:
                errors.append("stability_metrics: at least one metric (an empty list would switch the criterion off)")
        elif key == "quality_thresholds":
            if not isinstance(value, Mapping) or not value:
                errors.append("quality_thresholds: an object {task: max regression rate}")
                continue
            thresholds = {}
            for task, t in value.items():
                if not isinstance(task, str) or not task or len(task) > 100:
                    errors.append("quality_thresholds: task names are non-empty strings")
                elif not finite(t) or not 0 <= float(t) <= 0.5:
                    errors.append(f"quality_thresholds.{task}: a fraction between 0 and 0.5")
                else:
                    thresholds[task] = float(t)
            out[key] = thresholds
        elif key == "memory_fraction":
            if not finite(value) or not 0 < float(value) <= 1:
                errors.append("memory_fraction: a fraction above 0 and at most 1")
            else:
                out[key] = float(value)
        elif key == "memory_capacity_bytes":
            if value is None:
                out[key] = None
            elif not finite(value) or not 0 < float(value) <= MAX_CAPACITY_BYTES:
                errors.append("memory_capacity_bytes: a positive number of bytes (at most 1 PiB)")
            else:
                out[key] = int(value)
    if errors:
        raise GateSettingsError(errors)
    return out


def gate_settings_resolve(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """DEFAULT_SETTINGS overlaid with ``settings`` (stored settings are not re-validated here;
    unknown keys are kept, so they stay visible as deviations)."""
    out = {
        k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
        for k, v in DEFAULT_SETTINGS.items()
    }
    for key, value in (settings or {}).items():
        if value is None and key != "memory_capacity_bytes":
            continue
        out[key] = value
    return out


def gate_settings_deviations(settings: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Every setting that differs from its default: ``{"key", "default", "value", "note"}``."""
    resolved = gate_settings_resolve(settings)
    out = []
    for key, value in resolved.items():
        default = DEFAULT_SETTINGS.get(key, "(not a gate setting)")
        if key not in DEFAULT_SETTINGS:
            out.append({"key": key, "default": None, "value": value, "note": "unknown setting, ignored"})
        elif value != default:
            out.append({"key": key, "default": default, "value": value, "note": ""})
    return out
