"""Latency quantile series stored with the comparison, enough to draw CDFs without keeping every
request on the page. Seconds throughout."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

CDF_POINTS = 101


def latency_cdf(derived: pd.DataFrame, *, groups: list[tuple[Any, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Quantiles (0..100 %) of TTFT, TPOT and e2e per arm x load, enough to draw CDFs without
    keeping every request on the page: ``{metric: [{arm, load, x, y}]}``, seconds, the series in
    the order of ``groups`` ((arm, load) pairs)."""
    if derived.empty:
        return {}
    qs = np.linspace(0, 1, CDF_POINTS)
    by_group = {key: frame for key, frame in derived.groupby(["arm", "load"], sort=False)}
    out: dict[str, list[dict[str, Any]]] = {}
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        series = []
        for arm, load in groups:
            group = by_group.get((arm, load))
            values = group[metric].dropna().to_numpy(dtype=float) if group is not None else np.empty(0)
            if values.size:
                series.append(
                    {"arm": arm, "load": load, "x": np.quantile(values, qs).tolist(), "y": qs.tolist()}
                )
        out[metric] = series
    return out


SLICE_CDF_QUANTILES = np.linspace(0, 1, 41)
SLICE_CDF_METRICS: tuple[str, ...] = ("ttft_s", "e2e_s")


def slice_cdf(derived: pd.DataFrame, *, dims: tuple[str, ...]) -> dict[str, Any]:
    """Quantiles of TTFT and e2e (seconds) per slice x arm x load, enough to draw a slice's
    latency CDFs: ``{"q": [0..1], "series": [{dimension, value, metric, arm, load, x}]}`` with
    ``x[i]`` the ``q[i]`` quantile. Coarser than the whole experiment's CDF (41 points) to keep
    the stored comparison small."""
    series: list[dict[str, Any]] = []
    for dim in dims:
        for (value, arm, load), group in derived.groupby([dim, "arm", "load"], sort=True):
            for metric in SLICE_CDF_METRICS:
                values = group[metric].to_numpy(dtype=float)
                values = values[np.isfinite(values)]
                if values.size:
                    x = np.quantile(values, SLICE_CDF_QUANTILES).tolist()
                    series.append({"dimension": dim, "value": value, "metric": metric, "arm": arm, "load": load, "x": x})
    return {"q": SLICE_CDF_QUANTILES.tolist(), "series": series}
