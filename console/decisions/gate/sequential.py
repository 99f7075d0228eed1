"""Criterion 2 on an experiment that ran until decided (``console.experiments.until_decided``).

Such an experiment looked at its primary endpoint after each repeat and stopped on what it saw, so
its plain 95% interval has lost its coverage: the interval that keeps it is the look's, at the
adjusted level ``1 - alpha / (K m)`` (Bonferroni over the looks and the endpoints: every look's
interval holds at once with probability at least ``1 - alpha``). The primary endpoint's row is
read at that level: the look whose comparison is the one the gate reads (its key). Without such a
look (the comparison is of other runs, or was recomputed under another version) the primary
endpoint is not measured, never read at 95%. The other rows (guards, headline) are exploratory
and keep their 95% intervals.

Pure functions; no Django. ``gate_sequential_attach`` adds the fact; ``sequential_primary`` is
what criterion 2 reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.numbers import rate

FACT = "sequential"


def sequential_facts(
    until_decided: Mapping[str, Any] | None, *, candidate_arm: str | None, comparison_key: str | None
) -> dict[str, Any] | None:
    """The fact for one candidate: None when the experiment did not run until decided, else
    ``{"level", "metric", "stat", "repeats", "outcome", "rows": [{"load", "delta", "delta_lo",
    "delta_hi", "noise_floor", "measured", "reason"}]}`` from the look of ``comparison_key``
    (``repeats`` None and no rows when no look is of it); bounds in the metric's unit."""
    if not until_decided:
        return None
    looks = list(until_decided.get("looks") or [])
    look = next((lk for lk in reversed(looks) if comparison_key and lk.get("key") == comparison_key), None)
    stop = until_decided.get("stop") or {}
    rows = [
        {
            "load": e["load"],
            "delta": e.get("delta"),
            "delta_lo": e.get("lo"),
            "delta_hi": e.get("hi"),
            "noise_floor": e.get("noise_floor"),
            "measured": bool(e.get("measured")),
            "reason": e.get("reason"),
        }
        for e in (look or {}).get("endpoints", [])
        if e.get("arm") == candidate_arm
    ]
    return {
        "level": float(until_decided["level"]),
        "metric": until_decided.get("metric"),
        "stat": until_decided.get("stat"),
        "repeats": look["repeats"] if look else None,
        "outcome": stop.get("outcome") if stop.get("repeats") == (look or {}).get("repeats") else None,
        "rows": rows,
    }


def gate_sequential_attach(
    facts: dict[str, Any], *, until_decided: Mapping[str, Any] | None, comparison_key: str | None
) -> dict[str, Any]:
    """``facts`` (one candidate's, or a keep-off decision's with ``candidates``) with the
    ``sequential`` fact added to each candidate's facts; returned for chaining."""
    targets = list((facts.get("candidates") or {}).items()) if "candidates" in facts else []
    if "candidates" not in facts:
        targets = [(facts.get("candidate_arm"), facts)]
    for arm, arm_facts in targets:
        arm_facts[FACT] = sequential_facts(until_decided, candidate_arm=arm, comparison_key=comparison_key)
    return facts


def sequential_primary(facts: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The primary endpoint's ``row`` as criterion 2 reads it, and a note for its label: unchanged
    (note "") outside run until decided; else with the look's bounds at the adjusted level, or not
    measured when no look is of this comparison."""
    seq = facts.get(FACT)
    if not seq:
        return dict(row), ""
    note = f", run until decided: {rate(seq['level'])} interval"
    adjusted = next((r for r in seq.get("rows") or [] if r["load"] == row.get("load")), None)
    if adjusted is None or (seq.get("metric"), seq.get("stat")) != (row.get("metric"), row.get("stat")):
        reason = "run until decided: no look at the adjusted level is of this comparison (other runs, or another version)"
        return dict(row) | {"measured": False, "reason": reason}, note
    out = dict(row) | {"delta_lo": adjusted["delta_lo"], "delta_hi": adjusted["delta_hi"]}
    if not adjusted["measured"]:
        out |= {"measured": False, "reason": adjusted.get("reason") or "not measured at the adjusted level"}
    return out, note
