"""JSON API: list and read decisions, edit a draft, sign off (approver token only)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from console.accounts import roles
from console.api import ApiError, api_endpoint, json_body
from console.decisions import selectors, services
from console.decisions.models import Decision, FrozenDecisionError

API_EDITABLE = tuple(f for f in services.EDITABLE_FIELDS if f != "candidate_arm")


def decision_payload(decision: Decision, *, full: bool) -> dict[str, Any]:
    snap = selectors.decision_snapshot(decision=decision)
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
    out |= {
        "rationale": decision.rationale,
        "policy": decision.policy,
        "policy_ref": decision.policy_ref,
        "gate": gate,
        "checklist": decision.checklist,
        "rollback": d["rollback"],
        "signoff": (snap["signoff"] | {"signer": names["signer"]}) if snap["signoff"] else None,
        "supersedes_id": decision.supersedes_id,
        "superseded_by_id": superseded_by.pk if superseded_by else None,
        "archive": (
            {
                "sequence": record.sequence,
                "bundle_sha256": record.bundle_sha256,
                "previous_sha256": record.previous_sha256,
                "record_sha256": record.record_sha256,
            }
            if record
            else None
        ),
        "audit": [
            {
                "action": e.action,
                "actor": e.actor.username,
                "role": e.actor_role,
                "at": selectors.iso_utc(e.at),
            }
            for e in selectors.decision_events(decision=decision)
        ],
    }
    return out


def _get(pk: int) -> Decision:
    decision = (
        Decision.objects.select_related("experiment", "candidate_arm__config", "created_by")
        .filter(pk=pk)
        .first()
    )
    if decision is None:
        raise ApiError(404, f"no decision {pk}")
    return decision


@api_endpoint(path="/api/decisions", methods={"GET": "List decisions (filters: status, model)"})
def decisions_index(request: HttpRequest):
    qs = selectors.decisions_list(
        model=request.GET.get("model") or None, status=request.GET.get("status") or None
    )
    return {"decisions": [decision_payload(d, full=False) for d in qs[:500]]}


@api_endpoint(
    path="/api/decisions/{id}",
    methods={
        "GET": "A decision: gate, checklist, rollback plan, sign-off, archive hashes",
        "PATCH": "Edit a draft",
    },
    capability={"PATCH": roles.DRAFT_DECISION},
)
def decision_item(request: HttpRequest, pk: int):
    decision = _get(pk)
    if request.method == "PATCH":
        body = json_body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "send a JSON object of fields to change")
        unknown = set(body) - set(API_EDITABLE)
        if unknown:
            raise ApiError(400, f"not editable: {', '.join(sorted(unknown))}")
        try:
            decision = services.decision_update(
                decision=decision,
                actor=request.user,
                changes=body,
                comparison=selectors.decision_comparison(experiment=decision.experiment),
            )
        except FrozenDecisionError as exc:
            raise ApiError(409, str(exc)) from None
        except services.DecisionError as exc:
            raise ApiError(409 if "only a draft" in str(exc) else 400, str(exc)) from None
    return decision_payload(_get(decision.pk), full=True)


@api_endpoint(
    path="/api/decisions/{id}/signoff",
    methods={"POST": "Sign off a submitted decision (approver only)"},
    capability={"POST": roles.SIGN_DECISION},
    request_body={
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["verdict", "comment"],
                    "properties": {
                        "verdict": {"enum": ["approved", "rejected", "approved_with_conditions"]},
                        "comment": {"type": "string"},
                        "conditions": {"type": "string"},
                        "override_reason": {"type": "string"},
                    },
                }
            }
        }
    },
)
def decision_signoff(request: HttpRequest, pk: int):
    decision = _get(pk)
    body = json_body(request)
    if not isinstance(body, dict):
        raise ApiError(400, "send a JSON object with verdict and comment")
    try:
        decision = services.decision_sign(
            decision=decision,
            signer=request.user,
            verdict=str(body.get("verdict") or ""),
            comment=str(body.get("comment") or ""),
            conditions=str(body.get("conditions") or ""),
            override_reason=str(body.get("override_reason") or ""),
        )
    except PermissionDenied as exc:
        raise ApiError(403, str(exc)) from None
    except FrozenDecisionError as exc:
        raise ApiError(409, str(exc)) from None
    except services.DecisionError as exc:
        raise ApiError(400, str(exc)) from None
    return decision_payload(_get(decision.pk), full=True)
