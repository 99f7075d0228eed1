"""The rollback plan a draft starts with: triggers read off the evidence, and the default steps.

The plan's checks (a trigger's shape, what a complete plan has) are in ``decisions.checklist``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_ROLLBACK_STEPS = (
    "1. Switch the serving config back to the baseline (revert config below).\n"
    "2. Roll the serving fleet.\n3. Watch the triggers' metrics for one window."
)


def default_rollback_triggers(*, facts: Mapping[str, Any], traffic_class: str) -> list[dict[str, Any]]:
    """Triggers pre-filled from evidence: the promised class's p95 TPOT above the baseline's
    (seconds, over 10 minutes), the acceptance rate under 80% of the lowest measured (fraction,
    over 10 minutes) and any schema-validity regression (count, over 5 minutes)."""
    triggers: list[dict[str, Any]] = []
    tpot = [
        r
        for r in facts.get("comparisons") or []
        if r.get("metric") == "tpot_s" and r.get("stat") == "p95" and r.get("traffic_class") == traffic_class
    ]
    if tpot and isinstance(tpot[0].get("base"), int | float):
        triggers.append(
            {
                "metric": f"p95 TPOT ({traffic_class})",
                "op": ">",
                "threshold": round(float(tpot[0]["base"]), 6),
                "unit": "s",
                "window_min": 10,
            }
        )
    rate = facts.get("acceptance_rate_min")
    if isinstance(rate, int | float) and rate > 0:
        triggers.append(
            {
                "metric": "acceptance rate (80% of the lowest measured)",
                "op": "<",
                "threshold": round(0.8 * float(rate), 3),
                "unit": "fraction",
                "window_min": 10,
            }
        )
    triggers.append(
        {"metric": "schema-validity regressions", "op": ">", "threshold": 0, "unit": "count", "window_min": 5}
    )
    return triggers
