"""The rollout pages' filters, and the decision page's rollouts card (the decisions app sits below
rollouts and cannot read them: its page asks this tag)."""

from __future__ import annotations

from typing import Any

from django import template

from console.decisions.words import trigger_value
from console.rollouts import selectors
from console.rollouts.models import Look

register = template.Library()

STATE_BADGES = {
    Look.State.BREACH: "fail",
    Look.State.OK: "pass",
    Look.State.ERROR: "fail",
    "breached": "fail",
    "rolled_back": "fail",
    "completed": "pass",
    "running": "pass",
}


@register.filter
def state_badge(state: str) -> str:
    return STATE_BADGES.get(state, "na")


@register.filter
def value(number: Any, unit: str = "") -> str:
    """A pool's measured value in its trigger's unit (seconds as durations, fractions as percents)."""
    return trigger_value(number, unit)


@register.filter
def observed(number: Any, trigger: dict[str, Any]) -> str:
    """An observation of ``trigger`` (a difference in points when it compares with the control)."""
    return trigger_value(number, str(trigger.get("unit") or ""), difference=trigger.get("compare") == "control")


@register.simple_tag
def sparkline(series: list[float], threshold: float, width: int = 160, height: int = 36) -> dict[str, Any]:
    """The observations as SVG polyline points and the threshold's height, for the page's inline
    chart (``{% sparkline row.series threshold as spark %}``); empty without observations."""
    if not series:
        return {}
    lo, hi = min([*series, threshold]), max([*series, threshold])
    span = (hi - lo) or 1.0
    step = width / max(len(series) - 1, 1)

    def y(v: float) -> float:
        return round(height - 2 - (v - lo) / span * (height - 4), 1)

    return {"points": " ".join(f"{round(i * step, 1)},{y(v)}" for i, v in enumerate(series)), "threshold": y(threshold)}


@register.inclusion_tag("rollouts/_card.html", takes_context=True)
def decision_rollouts(context: dict[str, Any], decision: Any) -> dict[str, Any]:
    request = context["request"]
    rollouts = list(selectors.rollouts_of(decision=decision, user=request.user)[:10])
    latest = rollouts[0] if rollouts else None
    return {
        "decision": decision,
        "rollouts": rollouts,
        "latest": latest,
        "rows": selectors.trigger_rows(latest) if latest else [],
        "can_start": context.get("can_draft_decision") and decision.status in ("approved", "approved_with_conditions")
        and decision.proposal != "keep_off" and not any(r.is_active for r in rollouts),
    }
