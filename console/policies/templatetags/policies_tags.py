"""Formatting of policy numbers (benefits are seconds saved per request vs the baseline)."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def ms(value) -> str:
    """Seconds as signed milliseconds."""
    if value is None or value == "":
        return "—"
    return f"{float(value) * 1000:+.2f} ms"


@register.filter
def summary(value) -> str:
    """``{"benefit", "lo", "hi", "n"}`` as "+1.23 ms [+0.50, +2.00] (n=40)"."""
    if not value:
        return "—"
    b, lo, hi, n = value.get("benefit"), value.get("lo"), value.get("hi"), value.get("n")
    if b is None:
        return f"— (n={n})"
    text = ms(b)
    if lo is not None and hi is not None:
        text += f" [{lo * 1000:+.2f}, {hi * 1000:+.2f}]"
    return text + f" (n={n})"


@register.filter
def verdict(value) -> str:
    """CSS badge class for a summary: pass when the interval is above zero, fail below, na else."""
    if not value or value.get("lo") is None or value.get("hi") is None:
        return "na"
    if value["lo"] > 0:
        return "pass"
    if value["hi"] < 0:
        return "fail"
    return "na"


@register.filter
def pct(value) -> str:
    """A fraction as a percentage."""
    if value is None or value == "":
        return "—"
    return f"{float(value):.0%}"
