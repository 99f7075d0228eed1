from __future__ import annotations

from typing import Any

from django import template

from console.decisions.export import STATUS_LABEL, _fmt

register = template.Library()


@register.filter
def gate_value(number: dict[str, Any]) -> str:
    """A gate number row ``{"value", "unit"}`` as text (GiB for bytes, % for fractions)."""
    return _fmt(number.get("value"), number.get("unit", ""))


@register.filter
def status_label(status: str) -> str:
    return STATUS_LABEL.get(status, status)


@register.filter
def badge_class(status: str) -> str:
    return {"pass": "pass", "fail": "fail"}.get(status, "na")
