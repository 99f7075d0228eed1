"""How long the text a user types into a decision may be, checked before anything is stored.

The columns bound the short fields (title, owner, policy link); the long ones are text columns, bound
here so a runaway paste is refused with a message instead of filling the archive. A 20,000-word
comment (about 140,000 characters) fits, and the PDF export prints it across as many pages as it needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.exports import site_path_problem

TEXT_MAX_CHARS = 200_000
# Distinct approvers a decision may require (SPECREVIEW_APPROVALS_REQUIRED has the same bounds).
APPROVALS_MIN, APPROVALS_MAX = 1, 10
NOTE_MAX_CHARS = 10_000
FIELD_MAX_CHARS = {
    "title": 200,
    "policy_ref": 500,
    "rollback_owner": 200,
    "rationale": TEXT_MAX_CHARS,
    "rollback_steps": TEXT_MAX_CHARS,
    "rollback_verification": TEXT_MAX_CHARS,
    "comment": TEXT_MAX_CHARS,
    "conditions": TEXT_MAX_CHARS,
    "override_reason": TEXT_MAX_CHARS,
}


def decision_text_problems(fields: Mapping[str, Any]) -> list[str]:
    """What is wrong with the typed text among ``fields`` (field name -> value), as messages naming the
    field; empty when every length and the policy link are acceptable. Unknown keys are ignored."""
    problems = []
    for key, limit in FIELD_MAX_CHARS.items():
        value = fields.get(key)
        if isinstance(value, str) and len(value) > limit:
            problems.append(f"{key}: at most {limit:,} characters, got {len(value):,}")
    ref = fields.get("policy_ref")
    if isinstance(ref, str):
        problem = site_path_problem(ref)
        if problem:
            problems.append(f"policy_ref: {problem}")
    answers = fields.get("checklist_answers")
    if isinstance(answers, Mapping):
        for key, given in answers.items():
            note = given.get("note") if isinstance(given, Mapping) else None
            if isinstance(note, str) and len(note) > NOTE_MAX_CHARS:
                problems.append(
                    f"checklist note {key}: at most {NOTE_MAX_CHARS:,} characters, got {len(note):,}"
                )
    return problems
