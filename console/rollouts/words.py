"""A trigger's numbers in its unit, as the rollout page, its breach message and the API's readers
see them: seconds as durations, fractions as percentages, and a difference of fractions (a
trigger compared with the control) in percentage points."""

from __future__ import annotations

from typing import Any

from console import numbers


def value_text(number: Any, unit: str = "", *, difference: bool = False) -> str:
    if number is None:
        return numbers.DASH
    if unit == "s":
        return numbers.duration(number)
    if unit == "fraction":
        return numbers.points(number) if difference else numbers.rate(number)
    return numbers.number(number) if unit in ("", "count") else numbers.number(number, unit)


def observation_text(number: Any, trigger: dict[str, Any]) -> str:
    """An observation (or its mean, or a bound) of ``trigger``: a difference when it compares."""
    return value_text(number, str(trigger.get("unit") or ""), difference=trigger.get("compare") == "control")
