"""What the JSON API answers for a decision: the list row, and the full record (gate, checklist,
rollback plan, every signature, archive hashes, audit trail). Read-only; ``decisions.api`` serves it."""

from __future__ import annotations

from typing import Any

from console.decisions import selectors
from console.decisions.models import Decision


def decision_payload(decision: Decision, *, full: bool) -> dict[str, Any]:
    """A decision as the API answers it: the list row, or with ``full`` the whole record."""
    snap = selectors.decision_snapshot_shown(decision=decision)
    names = selectors.decision_names(decision=decision)
    d = snap["decision"]
    out: dict[str, Any] = {
        "id": decision.pk,
        "title": decision.title,
        "status": decision.status,
        "proposal": decision.proposal,
        "experiment_id": decision.experiment_id,
        "target_model": decision.experiment.target_model,
        "candidate": (
            {"arm": names["candidate_arm"], "config_hash": names["candidate_config_hash"]}
            if decision.candidate_arm_id
            else None
        ),
        "traffic_class": decision.traffic_class,
        "gate_overall": (decision.gate or {}).get("overall"),
        "created_by": names["created_by"],
        "created_at": d["created_at"],
        "url": f"/decisions/{decision.pk}/",
    }
    if not full:
        return out
    record = getattr(decision, "archive", None) if decision.is_signed else None
    superseded_by = selectors.decision_superseded_by(decision=decision)
    gate = dict(decision.gate or {})
    gate.pop("facts", None)
    approvals = selectors.decision_approvals(decision=decision)
    out |= {
        "rationale": decision.rationale,
        "policy": decision.policy,
        "policy_ref": decision.policy_ref,
        "gate": gate,
        "checklist": d["checklist"],
        "rollback": d["rollback"],
        # The signature that signed it (the last one), as before N of M approvals; every one in signoffs.
        "signoff": (snap["signoff"] | {"signer": names["signer"]}) if snap["signoff"] else None,
        "signoffs": [{**row, "signer": row["signer_username"]} for row in snap["signoffs"]],
        "approvals_required": approvals["required"],
        "approvals_count": approvals["count"],
        "supersedes_id": decision.supersedes_id,
        "superseded_by_id": superseded_by.pk if superseded_by else None,
        "archive": selectors.archive_hashes(record),
        "audit": selectors.decision_audit_rows(decision=decision),
    }
    return out
