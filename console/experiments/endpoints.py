"""The endpoints an experiment declares before it runs, and their validation.

An experiment names its promised traffic class, its primary latency metric and statistic, its
success metric and its alpha when it is defined; the gate later judges those only. They belong to
the experiment's definition, so they live here; the comparison (``console.analysis.comparison``)
reads the same names from here, so a declared endpoint is always one it computes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

# Paired headline comparisons: metric -> statistics with intervals. The comparison computes these;
# an experiment declares its primary endpoint from among them.
HEADLINE_STATS: dict[str, tuple[str, ...]] = {
    "ttft_s": ("mean", "p50", "p95", "p99"),
    "tpot_s": ("mean", "p50", "p95"),
    "e2e_s": ("mean", "p50", "p95", "p99"),
    "itl_chunk_mean_s": ("mean", "p95"),
    "met_deadline": ("mean",),
    "success": ("mean",),
}


class Endpoints(TypedDict):
    """What the experiment declared before it ran; the gate judges these only."""

    promised_class: str
    primary_metric: str
    primary_stat: str
    success_metric: str
    success_stat: str
    alpha: float
    knee_margin_s: float


DEFAULT_ENDPOINTS: Endpoints = {
    "promised_class": "interactive",
    "primary_metric": "tpot_s",
    "primary_stat": "p95",
    "success_metric": "success",
    "success_stat": "mean",
    "alpha": 0.05,
    "knee_margin_s": 0.0,
}
LATENCY_METRICS: tuple[str, ...] = ("ttft_s", "tpot_s", "e2e_s", "itl_chunk_mean_s")
SUCCESS_METRICS: tuple[str, ...] = ("success", "met_deadline")


class EndpointError(ValueError):
    """A declared endpoint names something the comparison cannot compute."""


def endpoints_resolve(endpoints: Mapping[str, Any] | None) -> Endpoints:
    """DEFAULT_ENDPOINTS overlaid with ``endpoints``, validated: the primary metric is a latency
    metric with a statistic the headline reports, the success metric a success metric, alpha in
    (0, 0.5], the knee margin >= 0 seconds. Raises :class:`EndpointError` naming the field."""
    out: dict[str, Any] = dict(DEFAULT_ENDPOINTS)
    for key, value in (endpoints or {}).items():
        if key not in DEFAULT_ENDPOINTS:
            raise EndpointError(f"endpoints.{key}: unknown field (known: {', '.join(DEFAULT_ENDPOINTS)})")
        if value is not None:
            out[key] = value
    if not isinstance(out["promised_class"], str) or not out["promised_class"]:
        raise EndpointError("endpoints.promised_class: a traffic class name")
    if out["primary_metric"] not in LATENCY_METRICS:
        raise EndpointError(f"endpoints.primary_metric: one of {', '.join(LATENCY_METRICS)}")
    if out["primary_stat"] not in HEADLINE_STATS[out["primary_metric"]]:
        raise EndpointError(
            f"endpoints.primary_stat: one of {', '.join(HEADLINE_STATS[out['primary_metric']])} for "
            f"{out['primary_metric']}"
        )
    if out["success_metric"] not in SUCCESS_METRICS or out["success_stat"] != "mean":
        raise EndpointError(f"endpoints.success_metric: one of {', '.join(SUCCESS_METRICS)} (stat mean)")
    try:
        alpha = float(out["alpha"])
        margin = float(out["knee_margin_s"])
    except (TypeError, ValueError) as exc:
        raise EndpointError("endpoints.alpha and endpoints.knee_margin_s: numbers") from exc
    if not 0 < alpha <= 0.5:
        raise EndpointError("endpoints.alpha: between 0 and 0.5")
    if not 0 <= margin <= 60:
        raise EndpointError("endpoints.knee_margin_s: between 0 and 60 seconds")
    out["alpha"], out["knee_margin_s"] = alpha, margin
    return out  # type: ignore[return-value]
