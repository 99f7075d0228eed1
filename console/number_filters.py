"""The formatting layer (``console.numbers``) as template filters, built into every template
(settings.TEMPLATES' ``builtins``): ``{{ value|seconds }}``, ``{{ value|show:"req/s" }}``."""

from __future__ import annotations

from typing import Any

from django import template

from console import numbers

register = template.Library()

register.filter("seconds", numbers.duration)
register.filter("ms", numbers.milliseconds)
register.filter("pct", numbers.rate)
register.filter("pp", numbers.points)
register.filter("ratio", numbers.ratio)
register.filter("change", numbers.change)
register.filter("usd", numbers.money)
register.filter("gib", numbers.size)
register.filter("count", numbers.count)
register.filter("num", numbers.number)


@register.filter
def show(value: Any, unit: str = "") -> str:
    """``value`` in ``unit`` (numbers.show)."""
    return numbers.show(value, unit)


@register.filter
def signed_ms(value: Any) -> str:
    """Seconds as signed milliseconds ("+1.23 ms"), for savings and benefits."""
    return numbers.milliseconds(value, signed=True)
