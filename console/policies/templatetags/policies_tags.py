"""The policy pages' filters: a benefit (seconds saved per request vs the baseline) with its
interval in signed milliseconds, its badge, and a policy's metric, features and slices in words
(console.policies.words). Plain numbers use the built-in filters of console.number_filters."""

from __future__ import annotations

from typing import Any

from django import template

from console.policies import words

register = template.Library()


@register.filter
def summary(value: dict[str, Any] | None) -> str:
    """``{"benefit", "lo", "hi", "n"}`` as "+1.23 ms [+0.500, +2.00] (n=40)"."""
    return words.benefit_text(value)


@register.filter
def verdict(value) -> str:
    """CSS badge class for a summary: pass when the interval is above zero, fail below, na else."""
    if not value or value.get("lo") is None or value.get("hi") is None:
        return "na"
    if value["lo"] > 0:
        return "pass"
    if value["hi"] < 0:
        return "fail"
    return "na"


@register.filter
def policy_metric(metric: Any) -> str:
    """A policy's metric key in words ("TPOT mean")."""
    return words.metric_text(metric)


@register.filter
def feature_list(features: Any) -> str:
    """Feature keys in words, comma-separated."""
    return words.features_text(features or [])
