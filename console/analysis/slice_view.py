"""The comparison page's slice views, read from the stored comparison: which slices there are,
which one a request asks for, and that slice's rows, shaped like the whole experiment's so the
same table and charts draw either. Pure functions over the stored summary (a dict); nothing here
computes a statistic: the intervals, noise floors and "not measured" verdicts of every slice are
computed with the whole experiment's by ``comparison_compute`` (``paired.paired_stage``).
"""

from __future__ import annotations

from typing import Any

ALL = "all"
DIMENSION_LABELS: dict[str, str] = {
    "task": "task",
    "traffic_class": "traffic class",
    "output_bucket": "output length (tokens, baseline's)",
    "prompt_bucket": "prompt length (tokens)",
    "turn_bucket": "session turn (0-based)",
}


class SliceError(ValueError):
    """The requested slice names no slice of this comparison."""


def slice_key(dimension: str, value: Any) -> str:
    """The query-string form of a slice: ``dimension:value``."""
    return f"{dimension}:{value}"


def _dimensions(summary: dict) -> list[str]:
    stored = summary.get("slice_dimensions")
    if stored:
        return [str(d) for d in stored]
    # Comparisons stored before slice_dimensions: the dimensions their slice rows have.
    return list(dict.fromkeys(str(r.get("dimension")) for r in summary.get("slices") or []))


def slice_options(summary: dict) -> list[dict[str, Any]]:
    """The selector's groups, in ``DIMENSION_LABELS`` order: ``{"dimension", "label", "options":
    [{"key", "value", "n_requests"}]}``; ``n_requests`` is the most distinct requests any of the
    slice's paired comparisons has (the resampled unit the "n too small" rule counts), None when
    no candidate was compared in it."""
    dims = _dimensions(summary)
    order = [d for d in DIMENSION_LABELS if d in dims] + [d for d in dims if d not in DIMENSION_LABELS]
    groups = []
    for dim in order:
        counts: dict[Any, int | None] = {}
        for r in summary.get("slices") or []:
            if r.get("dimension") != dim:
                continue
            seen = [int(d["n_requests"]) for d in r.get("deltas") or [] if d.get("n_requests") is not None]
            best = counts.get(r.get("value"))
            counts[r.get("value")] = max([*seen, *([best] if best is not None else [])], default=None)
        options = [{"key": slice_key(dim, v), "value": v, "n_requests": n} for v, n in counts.items()]
        if options:
            groups.append({"dimension": dim, "label": DIMENSION_LABELS.get(dim, dim), "options": options})
    return groups


def slice_parse(summary: dict, raw: str | None) -> tuple[str, Any] | None:
    """``None`` for all requests (no parameter, empty, or ``all``), else ``(dimension, value)``.
    Raises :class:`SliceError` saying which slices exist when ``raw`` names none of them."""
    raw = (raw or "").strip()
    if raw in ("", ALL):
        return None
    groups = slice_options(summary)
    for group in groups:
        for option in group["options"]:
            if option["key"] == raw:
                return group["dimension"], option["value"]
    dims = ", ".join(g["dimension"] for g in groups) or "none"
    raise SliceError(
        f"slice: {raw[:80]!r} is not a slice of this comparison; use all or dimension:value with a "
        f"dimension among {dims} (the selector lists every value)"
    )


def slice_rows(summary: dict, chosen: tuple[str, Any] | None) -> list[dict[str, Any]]:
    """The rows the headline table and the load charts draw: the whole experiment's headline rows,
    or the chosen slice's rows (one per arm x load, in the headline's order, with
    ``is_baseline`` set and the slice's paired ``deltas``)."""
    headline = summary.get("headline") or []
    if chosen is None:
        return headline
    dim, value = chosen
    base = summary.get("baseline_arm")
    found = {
        (r.get("arm"), r.get("load")): r
        for r in summary.get("slices") or []
        if r.get("dimension") == dim and r.get("value") == value
    }
    order = [(h.get("arm"), h.get("load")) for h in headline]
    order += [k for k in found if k not in order]
    return [found[k] | {"is_baseline": k[0] == base} for k in order if k in found]


def slice_cdf_series(summary: dict, chosen: tuple[str, Any] | None, *, metric: str) -> list[dict[str, Any]]:
    """CDF series (``arm``, ``load``, ``x`` seconds, ``y`` share) of ``metric`` for the slice, in
    the format of the whole experiment's ``cdf``."""
    if chosen is None:
        return (summary.get("cdf") or {}).get(metric, [])
    dim, value = chosen
    stored = summary.get("slice_cdf") or {}
    q = stored.get("q") or []
    return [
        {"arm": s["arm"], "load": s["load"], "x": s["x"], "y": q}
        for s in stored.get("series") or []
        if s.get("dimension") == dim and s.get("value") == value and s.get("metric") == metric
    ]


def class_goodput_rows(summary: dict) -> list[dict[str, Any]]:
    """Per traffic class x load x arm: goodput (requests within the class's deadline per second)
    and, for candidates, the paired ``class_goodput_rps`` comparison with its interval, floor and
    verdict (``delta`` None for the baseline, or a comparison stored without it)."""
    out = []
    for r in summary.get("slices") or []:
        if r.get("dimension") != "traffic_class":
            continue
        delta = next(
            (d for d in r.get("deltas") or [] if d.get("metric") == "class_goodput_rps" and d.get("stat") == "mean"),
            None,
        )
        out.append(
            {
                "traffic_class": r.get("value"),
                "load": r.get("load"),
                "arm": r.get("arm"),
                "is_baseline": r.get("arm") == summary.get("baseline_arm"),
                "goodput_rps": r.get("goodput_rps"),
                "attainment": r.get("deadline_attainment"),
                "n_requests": r.get("n_requests"),
                "delta": delta,
            }
        )
    out.sort(key=lambda row: (str(row["traffic_class"]), str(row["load"]), not row["is_baseline"], str(row["arm"])))
    return out


def telemetry_rows(summary: dict) -> list[dict[str, Any]]:
    """Per arm x load: mean accelerator utilisation (0..1), energy (J) and energy per successful
    request (J), each None when not measured (a CPU run samples no accelerator)."""
    out = []
    for h in summary.get("headline") or []:
        energy, util = h.get("energy_j"), h.get("mean_util")
        successes = h.get("successes") or 0
        out.append(
            {
                "arm": h.get("arm"),
                "load": h.get("load"),
                "mean_util": util,
                "energy_j": energy,
                "energy_per_success_j": energy / successes if energy is not None and successes else None,
                "measured": energy is not None or util is not None,
            }
        )
    return out
