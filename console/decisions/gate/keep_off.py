"""The gate of a decision to keep speculation off, judged as that choice.

It asks of every speculative candidate what criterion 2 would ask before enabling it: a clear
latency benefit for the promised class, beyond the noise floor and Holm-adjusted, no guard
worse. Keeping speculation off passes when no candidate shows one, fails when one does (keeping
it off forgoes a measured benefit, so signing asks for a reason), and is not measured when a
candidate's evidence cannot say either way, each candidate's reason in criterion 2's own words,
so the gate never contradicts the comparison it reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.decisions.gate.common import criterion_result
from console.decisions.gate.constants import FAIL, KEEP_OFF_CRITERION, NOT_MEASURED, PASS
from console.decisions.gate.latency import criterion_latency_benefit

KEY = KEEP_OFF_CRITERION[0]


def criterion_keep_off(facts: Mapping[str, Any], settings: Mapping[str, Any], *, traffic_class: str) -> dict[str, Any]:
    """``facts["candidates"]``: each speculative candidate's own facts (``gate_facts_keep_off``)."""
    evidence = [{"label": "primary endpoints", "anchor": "primary"}, {"label": "noise floor", "anchor": "noise"}]
    candidates: Mapping[str, Any] = facts.get("candidates") or {}
    if not candidates:
        return criterion_result(KEY, NOT_MEASURED, "the comparison has no speculative candidate to judge", [], evidence)
    pays: list[str] = []
    unknown: list[str] = []
    not_paying: list[str] = []
    numbers: list[dict[str, Any]] = []
    for arm, arm_facts in candidates.items():
        judged = criterion_latency_benefit(arm_facts, settings, traffic_class=traffic_class)
        numbers += [row | {"label": f"{arm}: {row['label']}"} for row in judged["numbers"]]
        line = f"{arm}: {judged['summary']}"
        {PASS: pays, NOT_MEASURED: unknown}.get(judged["status"], not_paying).append(line)
    if pays:
        return criterion_result(
            KEY, FAIL, "keeping speculation off forgoes a clear benefit: " + "; ".join(pays), numbers, evidence,
            unknown + not_paying,
        )
    if unknown:
        return criterion_result(
            KEY, NOT_MEASURED, "the evidence cannot say whether a candidate pays: " + "; ".join(unknown), numbers,
            evidence, not_paying,
        )
    return criterion_result(
        KEY, PASS, f"no candidate shows a clear benefit for {traffic_class}: " + "; ".join(not_paying), numbers, evidence
    )
