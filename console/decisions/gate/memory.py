"""Criterion 4: what the candidate's drafter costs in memory (peak memory against capacity, or
KV-cache pressure where the engine preallocates its KV cache)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.analysis.comparison.memory_sources import IN_PROCESS
from console.decisions.gate.common import criterion_result, finite, load_in_scope, number_row
from console.decisions.gate.constants import FAIL, NOT_MEASURED, PASS


def criterion_memory_headroom(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(4) What the candidate's drafter costs in memory.

    Where the engine preallocates its KV cache (vLLM: the candidate's runs recorded KV figures,
    ``facts["kv"]``), peak device memory is the same for every arm, so this judges KV pressure
    instead (:func:`_kv_headroom`). Elsewhere: candidate peak memory (bytes: the worker process's
    resident memory for an engine in process on a CPU host; for an openai arm, the server's
    registered telemetry, never the replay client's memory) at most ``memory_fraction`` of
    capacity. The figure's source is stated (``facts["memory"]["candidate_source"]``).
    """
    if facts.get("kv"):
        return _kv_headroom(facts, settings)
    key = "memory_headroom"
    evidence = [{"label": "memory per arm", "anchor": "memory"}]
    memory = facts.get("memory") or {}
    peak = memory.get("candidate_peak_bytes")
    # The worker's hardware is the capacity only where the engine ran in the worker (a remote
    # server's capacity is not the replay client's host memory: the gate settings must say it).
    remote = bool(memory.get("candidate_source")) and memory.get("candidate_source") != IN_PROCESS
    capacity = settings.get("memory_capacity_bytes") or (None if remote else memory.get("capacity_bytes"))
    fraction = float(settings["memory_fraction"])
    source = memory.get("candidate_source")
    if not finite(peak):
        why = f"candidate peak memory not measured ({source})" if source else "candidate peak memory not measured"
        return criterion_result(key, NOT_MEASURED, why, [], evidence)
    numbers = [
        number_row("candidate peak", peak, "bytes"),
        number_row("baseline peak", memory.get("baseline_peak_bytes"), "bytes"),
        number_row("capacity", capacity, "bytes"),
        number_row("allowed fraction", fraction, "fraction"),
    ]
    if not finite(capacity) or capacity <= 0:
        why = "memory capacity unknown (set it in the gate settings)"
        if remote:
            why = "the server's memory capacity is unknown: set memory_capacity_bytes in the gate settings (the worker host's memory is not the server's)"
        return criterion_result(key, NOT_MEASURED, why, numbers, evidence)
    used = peak / capacity
    numbers.append(number_row("candidate peak / capacity", used, "fraction"))
    ok = used <= fraction
    where = f"; measured by {source}" if source else ""
    return criterion_result(key, PASS if ok else FAIL, f"peak {used:.1%} of capacity (limit {fraction:.0%}){where}", numbers, evidence)


def _kv_headroom(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """(4) on an engine that preallocates its KV cache: per load, the candidate's preemptions per
    run (mean) not higher than the baseline's beyond the A/A floor (the largest difference
    between two baseline repeats); with one baseline repeat that part is not measured. The KV
    capacity the drafter took (candidate KV tokens vs the baseline's, a fraction) is stated:
    it is the cost, and what it does to live requests is the preemptions' verdict."""
    key = "memory_headroom"
    evidence = [{"label": "KV cache per arm", "anchor": "kv-cache"}]
    numbers: list[dict[str, Any]] = []
    worse, unmeasured, stated = [], [], []
    for fact in facts["kv"]:
        load = fact["load"]
        if not load_in_scope(load, settings):
            continue
        cand, base = fact["candidate"], fact.get("baseline") or {}
        lost = cand.get("kv_capacity_lost")
        numbers += [
            number_row(f"{load}: candidate KV capacity", cand.get("kv_cache_tokens"), "tokens"),
            number_row(f"{load}: baseline KV capacity", base.get("kv_cache_tokens"), "tokens"),
            number_row(f"{load}: KV capacity lost", lost, "fraction"),
        ]
        if finite(lost):
            stated.append(f"{lost:.1%} KV capacity lost at {load}")
        c, b, floor = cand.get("preemptions"), base.get("preemptions"), base.get("preemptions_floor")
        numbers += [
            number_row(f"{load}: candidate preemptions per run", c, "count"),
            number_row(f"{load}: baseline preemptions per run", b, "count"),
            number_row(f"{load}: A/A floor (baseline repeats)", floor, "count"),
        ]
        if not (finite(c) and finite(b)):
            unmeasured.append(f"preemptions not counted at {load}")
        elif not finite(floor):
            unmeasured.append(f"preemptions {c - b:+.1f} per run at {load} with no A/A floor (one baseline repeat)")
        elif c - b > floor:
            worse.append(f"{c - b:+.1f} preemptions per run at {load} (A/A floor {floor:g})")
    capacity = "; ".join(stated) or "KV capacity lost not measured"
    if worse:
        return criterion_result(key, FAIL, f"more preemptions than the baseline beyond noise: {'; '.join(worse)}; {capacity}", numbers, evidence)
    if unmeasured or not numbers:
        why = "; ".join(unmeasured) or "no load in scope recorded KV figures"
        return criterion_result(key, NOT_MEASURED, f"{why}; {capacity}", numbers, evidence)
    return criterion_result(key, PASS, f"preemptions within the A/A floor at every load; {capacity}", numbers, evidence)
