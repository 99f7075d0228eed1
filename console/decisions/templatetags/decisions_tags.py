from __future__ import annotations

import re
from typing import Any

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from console.decisions.export import STATUS_LABEL, value_text
from console.decisions.words import audit_details_text

register = template.Library()


@register.filter
def gate_value(number: dict[str, Any]) -> str:
    """A gate number row ``{"value", "unit"}`` as text (GiB for bytes, % for fractions)."""
    return value_text(number.get("value"), number.get("unit", ""))


@register.filter
def audit_details(details: dict[str, Any] | None) -> str:
    """An audit event's details in words (console.decisions.audit_text)."""
    return audit_details_text(details)


@register.filter
def status_label(status: str) -> str:
    return STATUS_LABEL.get(status, status)


@register.filter
def badge_class(status: str) -> str:
    return {"pass": "pass", "fail": "fail"}.get(status, "na")


_HASH = re.compile(r"\b[0-9a-f]{16,}\b")


@register.filter
def short_hashes(text: Any) -> str:
    """Text with every hex digest of 16+ characters cut to its first 10, the whole digest in the
    ``title`` (on hover) and kept for copy and find: engine versions stay readable."""
    out = []
    last = 0
    value = str(text or "")
    for match in _HASH.finditer(value):
        full = match.group(0)
        out.append(escape(value[last : match.start()]))
        out.append(format_html('<abbr class="hash" title="{}">{}…</abbr>', full, full[:10]))
        last = match.end()
    out.append(escape(value[last:]))
    return mark_safe("".join(out))  # noqa: S308  (every part escaped above)
