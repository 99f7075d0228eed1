"""Stored keys and values in words, for every page and export: a metric, a slice dimension, a
quality check or a field by its label, never its internal snake_case key; a value as words
(yes/no, a dash for none, numbers through ``console.numbers``), never a Python repr.

``key_words`` knows the project's own keys; any other key reads with its underscores as spaces
(a key a user brought, such as a vLLM argument, is shown as code by the template instead)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from console import numbers

# Metrics of the comparison (console.analysis.metrics), as the pages name them.
METRIC_LABELS: dict[str, str] = {
    "ttft_s": "TTFT",
    "tpot_s": "TPOT",
    "e2e_s": "e2e latency",
    "queue_s": "queue wait",
    "itl_chunk_mean_s": "mean inter-chunk gap",
    "itl_s": "inter-token gap",
    "met_deadline": "met deadline",
    "success": "success",
    "class_goodput_rps": "goodput share",
    "goodput_rps": "goodput",
    "acceptance_rate": "acceptance rate",
    "mean_acceptance_length": "mean acceptance length",
    "tokens_per_pass": "tokens per target pass",
    "num_output_tokens": "output tokens",
}
# Slice dimensions (console.analysis.slices) and policy features (console.policies.features).
DIMENSION_LABELS: dict[str, str] = {
    "task": "task",
    "traffic_class": "traffic class",
    "output_bucket": "output length (tokens, baseline's)",
    "prompt_bucket": "prompt length (tokens)",
    "turn_bucket": "session turn (0-based)",
    "run_output_bucket": "declared output bucket (recorded tokens)",
    "prompt_tokens_bucket": "prompt length (tokens)",
    "max_tokens_bucket": "output limit (tokens)",
    "has_schema": "has a JSON schema",
    "has_tools": "has tools",
    "model": "model",
}
# Quality checks (console.analysis.quality_pairs, console.analysis.grading).
CHECK_LABELS: dict[str, str] = {
    "exact_match": "exact match",
    "json_valid": "valid JSON",
    "schema_valid": "matches its JSON schema",
    "tool_valid": "valid tool call",
    "output_valid": "valid output",
}
STAT_LABELS: dict[str, str] = {"mean": "mean", "p50": "p50", "p95": "p95", "p99": "p99"}
LABELS: dict[str, str] = {**METRIC_LABELS, **DIMENSION_LABELS, **CHECK_LABELS}


def key_words(key: Any) -> str:
    """An internal key as its label, else with its underscores as spaces."""
    text = str(key)
    return LABELS.get(text) or text.replace("_", " ")


def metric_words(metric: Any, stat: Any = None) -> str:
    """``("tpot_s", "p95")`` as "TPOT p95"."""
    name = key_words(metric)
    return f"{name} {STAT_LABELS.get(str(stat), key_words(stat))}" if stat else name


def plain_value(value: Any) -> str:
    """A stored value as words: yes/no, a dash for none, a float to three significant digits,
    lists comma-separated, objects as "key value" pairs."""
    if value is None:
        return numbers.DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return numbers.number(value)
    if isinstance(value, Mapping):
        return plain_pairs(value)
    if isinstance(value, list | tuple | set):
        return listed(plain_value(v) for v in value) or numbers.DASH
    return str(value)


def plain_pairs(values: Mapping[str, Any]) -> str:
    """``{"torch": "2.13", "dtype": {"dtype": "float32"}}`` as "dtype (dtype float32), torch 2.13":
    sorted keys in words, nested objects in brackets."""
    return ", ".join(f"{key_words(k)} {_nested(v)}" for k, v in sorted(values.items(), key=lambda kv: str(kv[0])))


def _nested(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"({plain_pairs(value)})"
    return plain_value(value)


def listed(items: Iterable[str]) -> str:
    return ", ".join(items)
