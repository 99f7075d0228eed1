"""The decision pages' filters: stored gate and checklist text, gate numbers, triggers and times in
words (console.decisions.words), and long hex digests cut short with the whole one on hover."""

from __future__ import annotations

import re
from typing import Any

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from console.decisions.export import STATUS_LABEL
from console.decisions.words import (
    audit_details_text,
    checklist_words,
    gate_number_text,
    setting_value_text,
    stored_segments,
    stored_text,
    stored_words,
    trigger_condition,
    utc_text,
)

register = template.Library()


@register.filter
def gate_value(number: dict[str, Any]) -> str:
    """A gate number row ``{"label", "value", "unit"}`` as text, each item in its unit."""
    return gate_number_text(number)


@register.filter
def gate_label(label: Any) -> str:
    """A gate number's stored label with the metric and setting keys it names in words."""
    return stored_words(label)


@register.filter
def stored(text: Any) -> SafeString:
    """Stored gate or checklist text in words, a stored config as JSON in ``<code>``, long hex
    digests cut short (:func:`short_hashes`)."""
    return mark_safe(  # noqa: S308  (every part escaped: short_hashes escapes, format_html escapes)
        "".join(
            format_html("<code>{}</code>", piece) if is_code else short_hashes(piece)
            for piece, is_code in stored_segments(text)
        )
    )


@register.filter
def stored_plain(text: Any) -> str:
    """Stored text in words and JSON, as one plain string (to truncate before :func:`short_hashes`)."""
    return stored_text(text)


@register.filter
def trigger(value: dict[str, Any]) -> str:
    """A rollback trigger's condition ("> 59.0 ms")."""
    return trigger_condition(value)


@register.filter
def utc(value: Any) -> str:
    """A time as "2026-12-04 10:23 UTC"."""
    return utc_text(value)


@register.filter
def setting_json(value: Any) -> str:
    """A gate setting's value as the JSON one would type."""
    return setting_value_text(value)


@register.filter
def checklist_item(key: Any) -> str:
    """A checklist item by its question."""
    return checklist_words(key)


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
def short_hashes(text: Any) -> SafeString:
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
