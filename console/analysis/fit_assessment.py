"""Fit assessment: does this workload look like one where speculative decoding can pay off?

The six conditions of docs/fit.md (after the background text's "when speculative decoding is
worth evaluating", and whether the drafter's acceptance pays for its cost), each judged
``likely``, ``unlikely`` or ``unknown`` with its numbers and the reason, plus the generation share
of end-to-end latency per traffic class.

Three inputs: what is known before any run (the trace's requests, the experiment's configs and
load levels); once a baseline run finished, the per-run facts :func:`run_fit_stats` reduces its
stored results to (cached in ``RunSummary.data["fit"]`` by the worker, so a page GET only pools
small lists); and once a comparison is stored, each candidate's acceptance and timing in it
(:func:`fit_stats.candidate_fit_stats`). Pure functions over plain data; no Django.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from console import numbers, words
from console.analysis.fit_conditions import (
    generation_share,
    heaviest_load,
    output_length_condition,
    quality_condition,
    serving_condition,
    traffic_condition,
)
from console.analysis.fit_proposers import drafter_condition, proposer_condition
from console.analysis.fit_stats import FIT_VERSION, candidate_fit_stats


def fit_assess(
    *,
    trace: Mapping[str, Any],
    engine: str,
    target_model: str,
    specs: list[dict],
    load_levels: list[dict],
    runs: list[dict],
    catalog: Mapping[str, Mapping[str, Any]],
    candidates: list[dict] | None = None,
) -> dict[str, Any]:
    """The assessment: ``conditions`` (one per :data:`CONDITIONS`, each ``name``, ``title``,
    ``verdict``, ``numbers``, ``reason``), ``generation_share`` (per class), ``stage``
    ("before any run" or "after N baseline run(s)").

    ``trace``: ``classes`` ({class: count}), ``rate_rps`` (the trace's own mean arrival rate),
    ``output_limits`` and ``recorded_output_tokens`` (one per request, tokens or None);
    ``specs``: the candidates' speculative configs; ``runs``: :func:`run_fit_stats` of the
    finished baseline runs; ``catalog``: {model name: {"family", "size_bytes"}};
    ``candidates``: :func:`fit_stats.candidate_fit_stats` of the stored comparison (None: the
    ``specs`` alone, named by method and k, as before any run).
    """
    heaviest = heaviest_load(load_levels)
    if candidates is None:
        configs = {_spec_label(s): s for s in specs}
        candidates = candidate_fit_stats(headline=[], speculation=[], configs=configs, baseline_arm=None)
    return {
        "version": FIT_VERSION,
        "stage": f"after {len(runs)} baseline run(s)" if runs else "before any run",
        "conditions": [
            quality_condition(runs),
            output_length_condition(trace, runs),
            serving_condition(engine, runs, heaviest),
            traffic_condition(trace, load_levels, runs, heaviest),
            proposer_condition(engine, target_model, specs, catalog),
            drafter_condition(candidates, target=target_model, catalog=catalog, heaviest=heaviest),
        ],
        "generation_share": generation_share(runs),
    }


def _spec_label(spec: Mapping[str, Any]) -> str:
    """A speculative config named as an arm would be: its method and draft length."""
    k = spec.get("num_speculative_tokens")
    return f"{spec.get('method')}" + (f" k={k}" if k is not None else "")


def _tokens(value: Any) -> str:
    return numbers.number(value, "tokens")


def _percent(value: Any) -> str:
    """A percentage stored as 0-100 (NVML utilisation)."""
    return numbers.rate(None if value is None else float(value) / 100)


def _requests(value: Any) -> str:
    return numbers.number(value, "requests")


def _by_check(value: Any) -> str:
    """``{"json_schema": {"gradable": 10, "passed": 9}}`` as "JSON schema 9 of 10 passed"."""
    if not value:
        return numbers.DASH
    return words.listed(
        f"{CHECK_WORDS.get(k, words.key_words(k))} {numbers.count(v.get('passed'))} of {numbers.count(v.get('gradable'))} passed"
        for k, v in value.items()
    )


def _classes(value: Any) -> str:
    """Requests per traffic class (the classes are the trace's own names)."""
    if not value:
        return numbers.DASH
    return words.listed(f"{k} {numbers.count(v)}" for k, v in value.items())


# The fit checks of the baseline's outputs (console.analysis.fit_stats).
CHECK_WORDS = {"json_schema": "JSON schema", "tool_call": "tool call", "reference_answer": "reference answer"}

# A condition's numbers (fit_conditions) on the page: each key's label, and how its value shows.
FIT_NUMBERS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "gradable": ("gradable outputs", numbers.count),
    "passed": ("passed", numbers.count),
    "pass_rate": ("pass rate", numbers.rate),
    "bar": ("bar", numbers.rate),
    "by_check": ("by check", _by_check),
    "source": ("source", str),
    "n": ("requests", numbers.count),
    "min_tokens": ("long output", lambda v: f"at least {_tokens(v)}"),
    "share_at_least_min": ("share of long outputs", numbers.rate),
    "median_tokens": ("median length", _tokens),
    "p90_tokens": ("p90 length", _tokens),
    "busy_util_pct": ("compute-saturated at", lambda v: f"{_percent(v)} GPU utilisation or more"),
    "kv_full": ("KV cache full at", lambda v: f"{numbers.rate(v)} usage or more"),
    "judged_at": ("judged at load", lambda v: numbers.DASH if v is None else str(v)),
    "classes": ("requests by class", _classes),
    "interactive_share": ("interactive share", numbers.rate),
    "max_inflight": (
        "medium-to-low concurrency",
        lambda v: f"at most {numbers.count(v, 'requests')} in flight",
    ),
    "load": ("load", str),
    "gpu_util_pct": ("GPU utilisation", _percent),
    "gpu_memory_used": ("GPU memory used", numbers.rate),
    "kv_cache_usage": ("KV cache usage", numbers.rate),
    "preemptions": ("preemptions", numbers.number),
    "offered_rps": ("offered", lambda v: numbers.number(v, "req/s")),
    "concurrency_cap": ("concurrency cap", _requests),
    "measured_offered_rps": ("measured offered", lambda v: numbers.number(v, "req/s")),
    "inflight_mean": ("mean in flight", _requests),
    "inflight_max": ("most in flight", _requests),
}


def _shown(key: str, value: Any) -> tuple[str, str]:
    """A number's label and value in words (an unknown key: its key in words, its value plain)."""
    label, show = FIT_NUMBERS.get(key, (words.key_words(key), words.plain_value))
    return label, numbers.DASH if value is None else show(value)


def _drafter_line(r: Mapping[str, Any]) -> str:
    """One candidate's break-even in words: observed against needed, each with its unit."""
    nm = "not measured"
    where = (
        f"{r.get('arm')} at {r.get('load')}"
        if r.get("load") is not None
        else f"{r.get('arm')} (not compared yet)"
    )
    alpha = nm if r.get("alpha") is None else numbers.rate(r["alpha"])
    even = nm if r.get("needed_tokens_per_pass") is None else "none (above k + 1 tokens)"
    if r.get("alpha_needed") is not None:
        even = numbers.rate(r["alpha_needed"])
    tpp = nm if r.get("tokens_per_pass") is None else _tokens(r["tokens_per_pass"])
    said = [f"{r['tokens_per_pass_source']} records"] if r.get("tokens_per_pass_source") else []
    if r.get("expected_tokens_per_pass") is not None:
        said.append(f"{_tokens(r['expected_tokens_per_pass'])} expected from the acceptance, i.i.d.")
    tpp += f" ({'; '.join(said)})" if said else ""
    needed = nm
    if r.get("needed_tokens_per_pass") is not None:
        formula = f"k {numbers.number(r['k'])} × c {numbers.number(r['c'])} + 1"
        needed = f"more than {_tokens(r['needed_tokens_per_pass'])} ({formula})"
    cost = nm if r.get("c") is None else f"{numbers.number(r['c'])} of a target step"
    return (
        f"{where}: acceptance {alpha} (break-even {even}); tokens per target pass {tpp}, needs {needed}; "
        f"a drafter step costs {cost} ({r.get('c_source')})"
    )


def numbers_lines(name: str, numbers_: Mapping[str, Any]) -> list[str]:
    """A condition's numbers as short lines for the page, in words with their units (the API
    returns them as they are)."""
    if name == "proposer":
        lines = []
        for p in numbers_.get("proposers") or []:
            extra = ", configured" if p.get("configured") else ""
            note = f"; {p['note']}" if p.get("note") else ""
            suits = f"; suits {p['suits']}" if p.get("suits") else ""
            lines.append(f"{p['proposer']}: {p['kind']} ({p['source']}{extra}{note}){suits}")
        return lines
    if name == "drafter_acceptance":
        judged = (
            f"judged at load {numbers_['judged_at']}"
            if numbers_.get("judged_at")
            else "judged at each arm's load"
        )
        return [judged, *(_drafter_line(r) for r in numbers_.get("candidates") or [])]
    lines = ["{}: {}".format(*_shown(k, v)) for k, v in numbers_.items() if k != "loads"]
    for row in numbers_.get("loads") or []:
        lines.append(" · ".join("{} {}".format(*_shown(k, v)) for k, v in row.items()))
    return lines
