"""Stored details in words, for the decision page and its exports: an audit event's details (what
was proposed, which fields changed, what a signature overrode, which record superseded it) and the
evidence's versions and hardware. Never a Python repr and never an internal key: criteria by their
titles, proposals by their labels, field names as words, nested values flattened."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.decisions.gate.constants import TITLES
from console.decisions.models import Decision
from console.words import key_words, listed, plain_pairs, plain_value

PROPOSALS = dict(Decision.Proposal.choices)
VERDICTS = {"approved": "approved", "approved_with_conditions": "approved with conditions", "rejected": "rejected"}


def audit_details_text(details: Mapping[str, Any] | None) -> str:
    """``details`` of an AuditEvent as one line of words, parts joined by " · "; "" when empty."""
    if not details:
        return ""
    parts: list[str] = []
    for key, value in details.items():
        if value is None or value == [] or value == "":
            continue
        parts.append(_part(key, value))
    return " · ".join(parts)


def _part(key: str, value: Any) -> str:
    if key == "proposal":
        return f"proposal: {PROPOSALS.get(value, _words(value))}"
    if key == "supersedes":
        return f"supersedes decision #{value}"
    if key == "by_decision":
        return f"by decision #{value}"
    if key == "by_record_sha256":
        return f"its archive record sha256 {value}"
    if key == "verdict":
        return f"verdict: {VERDICTS.get(value, _words(value))}"
    if key == "overridden":
        return f"overriding the gate on: {_listed(TITLES.get(k, _words(k)) for k in value)}"
    if key == "fields":
        return f"changed: {_listed(_words(f) for f in value)}"
    if key == "format":
        return f"format: {value}"
    return f"{_words(key)}: {plain_value(value)}"


def _words(name: Any) -> str:
    return key_words(name)


_listed = listed
__all__ = ["audit_details_text", "plain_pairs", "plain_value"]
