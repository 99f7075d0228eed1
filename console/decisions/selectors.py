"""Reads: decisions, their evidence, the frozen snapshot a bundle holds, the archive check."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.db.models import OuterRef, Prefetch, Q, QuerySet, Subquery

from console.accounts import roles, teams
from console.analysis.comparison.schema import Summary
from console.analysis.selectors import comparison_summary_for_experiment
from console.decisions import archive
from console.decisions.evidence import decision_evidence
from console.decisions.models import ArchiveRecord, AuditEvent, Decision, SignOff
from console.experiments.models import Experiment
from console.jsonutil import json_safe
from workers.engines.redaction import document_redact


def decision_comparison(*, experiment: Experiment) -> Summary | None:
    """The typed comparison summary of ``experiment`` from ``console.analysis``, or None when the
    analysis has nothing to compare. Raises ``ComparisonSchemaError`` (its message says to
    recompute it) for one stored in another schema version or shape: a gate is never computed
    from a comparison this console cannot read."""
    return comparison_summary_for_experiment(experiment=experiment)


def decisions_list(
    *,
    user: Any,
    model: str | None = None,
    status: str | None = None,
    date_from: dt.date | None = None,
    date_to: dt.date | None = None,
    archived_only: bool = False,
) -> QuerySet[Decision]:
    """The decisions of the user's teams, newest first, filtered by target model (substring),
    status, creation date."""
    qs = teams.visible(
        Decision.objects.select_related("experiment", "candidate_arm__config", "created_by").prefetch_related(
            "signoffs"
        ),
        user,
    )
    if archived_only:
        qs = qs.filter(status__in=Decision.SIGNED_STATUSES)
    if model:
        qs = qs.filter(
            Q(experiment__target_model__icontains=model)
            | Q(candidate_arm__config__target_model__icontains=model)
        )
    if status == "superseded":
        qs = qs.filter(
            superseding__status__in=(Decision.Status.APPROVED, Decision.Status.APPROVED_WITH_CONDITIONS)
        )
    elif status:
        qs = qs.filter(status=status)
    if date_from:
        qs = qs.filter(created_at__date__gte=date_from)
    if date_to:
        qs = qs.filter(created_at__date__lte=date_to)
    return qs.distinct()


def final_signature_columns() -> dict[str, Subquery]:
    """Annotations for a decisions queryset: ``final_signer`` and ``final_signed_at`` of the last
    signature (what an archive list sorts by; one row per decision, however many signed)."""
    last = SignOff.objects.filter(decision=OuterRef("pk")).order_by("-signed_at", "-id")
    return {
        "final_signer": Subquery(last.values("signer_username")[:1]),
        "final_signed_at": Subquery(last.values("signed_at")[:1]),
    }


def decision_superseded_by(*, decision: Decision) -> Decision | None:
    """The signed approval that supersedes ``decision``, if any."""
    return (
        decision.superseding.filter(
            status__in=(Decision.Status.APPROVED, Decision.Status.APPROVED_WITH_CONDITIONS)
        )
        .order_by("id")
        .first()
    )


def decision_events(*, decision: Decision) -> QuerySet[AuditEvent]:
    return decision.events.select_related("actor").order_by("at", "id")


def decision_audit_rows(*, decision: Decision) -> list[dict[str, Any]]:
    """The audit trail as the API and the exports print it: action, actor, role, UTC time."""
    return [
        {"action": e.action, "actor": e.actor.username, "role": e.actor_role, "at": iso_utc(e.at)}
        for e in decision_events(decision=decision)
    ]


def archive_hashes(record: ArchiveRecord | None) -> dict[str, Any] | None:
    """A signed decision's place in the hash chain (None before it is archived)."""
    if record is None:
        return None
    return {
        "sequence": record.sequence,
        "bundle_sha256": record.bundle_sha256,
        "previous_sha256": record.previous_sha256,
        "record_sha256": record.record_sha256,
    }


# What each audit action makes its actor, for separation of duties (see docs/authorization.md).
_PARTICIPATION: dict[str, str] = {
    AuditEvent.Action.CREATED: "drafted",
    AuditEvent.Action.EDITED: "edited",
    AuditEvent.Action.SUBMITTED: "submitted",
}


def decision_participants(*, decision: Decision) -> dict[int, list[str]]:
    """Who shaped ``decision`` before sign-off: user id -> what they did ("drafted", "edited",
    "submitted", in that order), from the drafter column and the append-only audit trail.
    Every edit counts, even one that changed no field: saving recomputes the gate."""
    out: dict[int, list[str]] = {decision.created_by_id: ["drafted"]}
    actions = decision.events.filter(action__in=list(_PARTICIPATION)).values_list("actor_id", "action")
    for actor_id, action in actions:
        role = _PARTICIPATION[action]
        done = out.setdefault(actor_id, [])
        if role not in done:
            done.append(role)
    order = list(_PARTICIPATION.values())
    return {user_id: sorted(done, key=order.index) for user_id, done in out.items()}


def decision_sign_refusal(*, decision: Decision, user: Any) -> str | None:
    """Why ``user`` may not sign ``decision`` under separation of duties (None: they may, as far
    as duties go; the role and the status are checked separately). The signer must differ from
    the drafter, from every editor and from the submitter, and be an approver of the decision's team."""
    if not teams.can(user, roles.SIGN_DECISION, team_id=teams.team_id_of(decision)):
        return "only an approver of the decision's team may sign it"
    done = decision_participants(decision=decision).get(user.pk)
    if not done:
        return None
    what = done[0] if len(done) == 1 else ", ".join(done[:-1]) + " and " + done[-1]
    return f"you {what} this decision: someone else must sign"


def decision_snapshot_shown(*, decision: Decision) -> dict[str, Any]:
    """:func:`decision_snapshot` as pages, the API and exports show it: without keys that rows
    stored before configs were validated may hold (the raw snapshot stays what the archive
    check compares)."""
    return document_redact(decision_snapshot(decision=decision))


def iso_utc(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.UTC).isoformat() if value else None


def decision_snapshot(*, decision: Decision) -> dict[str, Any]:
    """The decision and its sign-off rows as plain data: what a bundle freezes and what
    ``verify_archive`` compares the database against. Only columns of the decision's own
    (immutable) rows: names of users and arms, which other apps may change, are in
    :func:`decision_names`."""
    out: dict[str, Any] = {
        "decision": {
            "id": decision.pk,
            "title": decision.title,
            "experiment_id": decision.experiment_id,
            "proposal": decision.proposal,
            "candidate_arm_id": decision.candidate_arm_id,
            "traffic_class": decision.traffic_class,
            "rationale": decision.rationale,
            "policy": decision.policy,
            "policy_ref": decision.policy_ref,
            "gate_settings": decision.gate_settings,
            "gate": decision.gate,
            "comparison_key": decision.comparison_key,
            "checklist": decision.checklist,
            "rollback": decision_rollback(decision=decision),
            "supersedes_id": decision.supersedes_id,
            "status": decision.status,
            "created_by_id": decision.created_by_id,
            "created_at": iso_utc(decision.created_at),
            "submitted_at": iso_utc(decision.submitted_at),
        },
        "signoff": None,
    }
    signatures = decision.signatures() if decision.pk else []
    if decision.is_signed and signatures:
        out["signoff"] = _signoff_row(signatures[-1])  # the one that signed: as bundles before N of M
    # Sections bundles carry since N of M approvals (verify_archive compares them where present).
    out["approvals_required"] = decision.approvals_needed
    out["signoffs"] = [_signoff_row(s) | {"signer_username": s.signer_username} for s in signatures]
    return json_safe(out)


def _signoff_row(signoff: SignOff) -> dict[str, Any]:
    return {
        "signer_id": signoff.signer_id,
        "role": signoff.signer_role,
        "verdict": signoff.verdict,
        "comment": signoff.comment,
        "conditions": signoff.conditions,
        "override_reason": signoff.override_reason,
        "signed_at": iso_utc(signoff.signed_at),
    }


def decision_approvals(*, decision: Decision) -> dict[str, Any]:
    """How far signing has come: ``required`` (approvals it needs), ``count`` (approvals so far),
    ``signatures`` (every SignOff, in order), ``conditions`` (every approval's conditions, with
    who set them), ``label`` ("1 of 2 approvals")."""
    signatures = decision.signatures()
    required = decision.approvals_needed
    count = sum(1 for s in signatures if s.verdict != Decision.Status.REJECTED)
    return {
        "required": required,
        "count": count,
        "signatures": signatures,
        "conditions": [
            {"signer": s.signer_username, "conditions": s.conditions} for s in signatures if s.conditions
        ],
        "label": f"{count} of {required} approval{'s' if required != 1 else ''}",
    }


def decision_names(*, decision: Decision) -> dict[str, Any]:
    """Human-readable names for the ids in the snapshot: the drafter's and the arm's as they are
    now, the signer's as recorded at signing (the bundle keeps all of them as they were then)."""
    arm = decision.candidate_arm
    signoff = decision.signoff
    return {
        "created_by": decision.created_by.username,
        "signer": signoff.signer_username if signoff else None,  # the name that signed (the last one)
        "candidate_arm": arm.label if arm else None,
        "candidate_config_hash": arm.config.content_hash if arm else None,
    }


def decision_rollback(*, decision: Decision) -> dict[str, Any]:
    return {
        "triggers": decision.rollback_triggers,
        "revert_config": decision.rollback_revert_config,
        "steps": decision.rollback_steps,
        "owner": decision.rollback_owner,
        "verification": decision.rollback_verification,
    }


def audit_event_live(event: AuditEvent) -> dict[str, Any]:
    """An audit event's own columns, as a bundle archives them and verify_archive reads them back."""
    return {
        "id": event.pk,
        "action": event.action,
        "actor_id": event.actor_id,
        "role": event.actor_role,
        "at": iso_utc(event.at),
        "details": event.details,
    }


def archive_verify() -> dict[str, Any]:
    """Recompute the whole chain, compare each archived decision, sign-off and audit trail with
    its bundle, and check that every signed decision has a record. Returns :func:`archive.chain_verify`'s
    result plus ``count`` (records) and ``head_sha256`` (the last record's hash: an auditor who
    notes it can later tell whether records were removed from the end of the chain)."""
    records = (
        ArchiveRecord.objects.select_related("decision__candidate_arm__config", "decision__created_by")
        .prefetch_related(
            Prefetch("decision__events", queryset=AuditEvent.objects.order_by("at", "id")), "decision__signoffs"
        )
        .order_by("sequence")
    )

    def rows():
        for rec in records.iterator(chunk_size=200):
            row = {
                "sequence": rec.sequence,
                "decision_id": rec.decision_id or rec.rollout_decision_id,
                "bundle": rec.bundle,
                "bundle_sha256": rec.bundle_sha256,
                "previous_sha256": rec.previous_sha256,
                "record_sha256": rec.record_sha256,
                "archived_at": iso_utc(rec.archived_at),
            }
            if rec.decision is None:  # a rollout's end: its rows are append-only, the chain is its check
                yield row
                continue
            yield row | {
                "live": decision_snapshot(decision=rec.decision),
                "live_audit": [audit_event_live(e) for e in rec.decision.events.all()],
                "live_signer": getattr(rec.decision.signoff, "signer_username", None),
            }

    result = archive.chain_verify(rows())
    result["count"] = records.count()
    last = records.last()
    result["head_sha256"] = last.record_sha256 if last else archive.GENESIS
    if result["ok"]:
        orphan = (
            Decision.objects.filter(status__in=Decision.SIGNED_STATUSES, archive__isnull=True)
            .order_by("id")
            .first()
        )
        if orphan is not None:
            result["ok"] = False
            result["break"] = {
                "sequence": None,
                "decision_id": orphan.pk,
                "reason": "a signed decision has no archive record (a record was removed)",
            }
    return result


def decision_bundle_text(*, decision: Decision) -> str:
    """The evidence bundle: the archived canonical text once signed, else a provisional one
    (marked ``"provisional": true``) built from the current rows."""
    record = ArchiveRecord.objects.filter(decision=decision).first()
    if record is None:
        return archive.canonical_json(
            document_redact(decision_bundle(decision=decision)) | {"provisional": True}
        )
    try:
        bundle = json.loads(record.bundle)
    except ValueError:
        return record.bundle
    shown = document_redact(bundle)
    if shown == bundle:
        return record.bundle
    # Archived before configs were validated, with a key inside: shown without it, saying so
    # (the archive keeps the text its sha256 covers; verify_archive checks that one).
    return archive.canonical_json(
        shown | {"redacted": {"archived_bundle_sha256": record.bundle_sha256, "note": REDACTION_NOTE}}
    )


REDACTION_NOTE = (
    "keys found in the archived bundle are shown as [redacted]; the archived text, which "
    "archived_bundle_sha256 covers, is unchanged and still checked by verify_archive"
)


def decision_bundle(*, decision: Decision) -> dict[str, Any]:
    """The evidence bundle as data: the decision and sign-off snapshot, the evidence (trace
    sha256, config hashes, engine and library versions, hardware, runs), the gate with its
    facts (headline metrics), the policy (inside the decision) and the audit trail so far."""
    snapshot = decision_snapshot(decision=decision)
    facts = (decision.gate or {}).get("facts") or {}
    evidence = decision_evidence(
        experiment=decision.experiment, candidate_arm=decision.candidate_arm, facts=facts
    )
    for key in ("facts", "stats_reported", "acceptance_by_task"):
        evidence.pop(key, None)
    earlier = (
        ArchiveRecord.objects.filter(decision_id=decision.supersedes_id).first()
        if decision.supersedes_id
        else None
    )
    evidence["supersedes"] = (
        {"decision_id": earlier.decision_id, "record_sha256": earlier.record_sha256} if earlier else None
    )
    events = [{"actor": e.actor.username} | audit_event_live(e) for e in decision_events(decision=decision)]
    return json_safe(
        {
            "schema": archive.BUNDLE_SCHEMA,
            **snapshot,
            "names": decision_names(decision=decision),
            "evidence": evidence,
            "audit": events,
        }
    )
