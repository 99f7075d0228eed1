"""The three roles, as Django groups with permissions.

engineer: upload traces, define and run experiments, draft decisions.
approver: everything an engineer can, plus sign off.
viewer: read only; sees metrics, counts, flags and hashes, never raw text (prompts, messages,
tool outputs, references, model outputs): ``console.accounts.access.raw_text_allowed``.
"""

from __future__ import annotations

ENGINEER = "engineer"
APPROVER = "approver"
VIEWER = "viewer"
ROLES = (ENGINEER, APPROVER, VIEWER)

UPLOAD_TRACE = "accounts.upload_trace"
RUN_EXPERIMENT = "accounts.run_experiment"
DRAFT_DECISION = "accounts.draft_decision"
SIGN_DECISION = "accounts.sign_decision"
READ_RAW_TEXT = "accounts.read_raw_text"

ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    ENGINEER: (UPLOAD_TRACE, RUN_EXPERIMENT, DRAFT_DECISION, READ_RAW_TEXT),
    APPROVER: (UPLOAD_TRACE, RUN_EXPERIMENT, DRAFT_DECISION, SIGN_DECISION, READ_RAW_TEXT),
    VIEWER: (),
}
