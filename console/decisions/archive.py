"""Canonical JSON, hashes and the archive chain check. Pure functions; no Django.

Canonical JSON: keys sorted, no insignificant whitespace, UTF-8, floats rounded to 12
significant digits (so the same measurement written by two machines hashes the same) and
non-finite floats written as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (JSON has
no such numbers). Integral values keep their type (``1`` and ``1.0`` differ).

Chain: record i stores ``bundle_sha256`` = sha256(bundle text), ``previous_sha256`` = record
i-1's ``record_sha256`` (``GENESIS`` for the first) and ``record_sha256`` = sha256 of the
canonical header ``{sequence, decision_id, bundle_sha256, previous_sha256, archived_at}``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from console import jsonutil

GENESIS = "0" * 64
# /2: every signature (``signoffs``) and the approvals it needed (``approvals_required``); ``signoff``
# is still the signature that signed it.
BUNDLE_SCHEMA = "specreview.decision-bundle/2"
LATER_SECTIONS = ("signoffs", "approvals_required")


def _normalise(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        rounded = float(f"{value:.12g}")
        return 0.0 if rounded == 0 else rounded  # -0.0 and 0.0 hash the same
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return _normalise(value.item())
    raise TypeError(f"not JSON-serialisable in a bundle: {type(value).__name__}")


def canonical_json(value: Any) -> str:
    """The canonical text of ``value`` (see module docstring)."""
    return jsonutil.canonical_json(_normalise(value))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def record_header(
    *, sequence: int, decision_id: int, bundle_sha256: str, previous_sha256: str, archived_at: str
) -> dict[str, Any]:
    return {
        "sequence": sequence,
        "decision_id": decision_id,
        "bundle_sha256": bundle_sha256,
        "previous_sha256": previous_sha256,
        "archived_at": archived_at,
    }


def record_hash(**header: Any) -> str:
    """sha256 of the canonical record header (keyword arguments of :func:`record_header`)."""
    return sha256_text(canonical_json(record_header(**header)))


def chain_verify(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Recompute the chain over ``records`` in sequence order.

    Each record: ``sequence``, ``decision_id``, ``bundle`` (text), ``bundle_sha256``,
    ``previous_sha256``, ``record_sha256``, ``archived_at`` (ISO text), and optionally ``live``:
    the canonical decision and sign-off as the database holds them now, which must equal the
    bundle's ``decision`` and ``signoff`` sections (and ``signoffs``, ``approvals_required`` in
    bundles that have them), and ``live_audit``: the decision's audit
    events as the database holds them now, which must still hold every event the bundle
    recorded (:func:`audit_trail_problem`), and ``live_signer``: the signer's name the sign-off
    row recorded, which must be the bundle's ``names.signer``. Returns ``{"ok", "checked", "break"}`` where
    ``break`` is None or ``{"sequence", "decision_id", "reason"}`` for the first mismatch.
    """
    previous = GENESIS
    checked = 0
    for rec in records:
        where = {"sequence": rec["sequence"], "decision_id": rec["decision_id"]}
        reason = None
        if sha256_text(rec["bundle"]) != rec["bundle_sha256"]:
            reason = "bundle does not match its sha256"
        elif rec["previous_sha256"] != previous:
            reason = "previous-record hash does not match the chain"
        elif (
            record_hash(
                sequence=rec["sequence"],
                decision_id=rec["decision_id"],
                bundle_sha256=rec["bundle_sha256"],
                previous_sha256=rec["previous_sha256"],
                archived_at=rec["archived_at"],
            )
            != rec["record_sha256"]
        ):
            reason = "record header does not match its sha256"
        else:
            try:
                bundle = json.loads(rec["bundle"])
            except json.JSONDecodeError:
                bundle = None
            if not isinstance(bundle, dict):
                reason = "bundle is not a JSON object"
            elif bundle.get("decision", {}).get("id") != rec["decision_id"]:
                reason = "bundle names another decision"
            elif rec.get("live") is not None:
                # Bundles archived before N of M approvals have no "signoffs" or "approvals_required".
                sections = ("decision", "signoff", *(k for k in LATER_SECTIONS if k in bundle))
                for section in sections:
                    if canonical_json(rec["live"].get(section)) != canonical_json(bundle.get(section)):
                        reason = _section_problem(section, rec["live"].get(section), bundle.get(section))
                        break
            if reason is None and rec.get("live_audit") is not None:
                reason = audit_trail_problem(bundle.get("audit") or [], rec["live_audit"])
            if reason is None and rec.get("live_signer") is not None:
                if rec["live_signer"] != (bundle.get("names") or {}).get("signer"):
                    reason = "the sign-off's recorded signer name differs from its archived bundle"
        if reason:
            return {"ok": False, "checked": checked, "break": where | {"reason": reason}}
        previous = rec["record_sha256"]
        checked += 1
    return {"ok": True, "checked": checked, "break": None}


def _section_problem(section: str, live: Any, archived: Any) -> str:
    """Why a snapshot section differs from its bundle, naming a rewritten signer name as such."""
    if section == "signoffs" and isinstance(live, list) and isinstance(archived, list):

        def unnamed(rows: list[Any]) -> str:
            return canonical_json(
                [{k: v for k, v in dict(r).items() if k != "signer_username"} for r in rows]
            )

        if len(live) == len(archived) and unnamed(live) == unnamed(archived):
            return "a sign-off's recorded signer name differs from its archived bundle"
        return "the sign-offs in the database differ from their archived bundle"
    return f"the {section} row in the database differs from its archived bundle"


# What an archived audit event must still say in the live table. Bundles archived before events
# carried their id and actor id are matched on the rest, in order (the actor is a name there, and
# renaming a user is not tampering).
_EVENT_FIELDS = ("action", "actor_id", "role", "at", "details")
_LEGACY_EVENT_FIELDS = ("action", "role", "at", "details")


def _event_name(event: Mapping[str, Any], position: int) -> str:
    label = f"{event['id']}" if "id" in event else f"#{position}"
    return f"audit event {label} ({event.get('action')} at {event.get('at')})"


def audit_trail_problem(archived: list[Mapping[str, Any]], live: list[Mapping[str, Any]]) -> str | None:
    """Why the live audit trail of a decision no longer holds what its bundle archived, naming
    the first event that is missing or changed; None when every archived event is still there as
    it was (events written after signing, such as exports, are expected).

    ``archived``: the bundle's ``audit`` list. ``live``: the decision's events now, in (time, id)
    order, each with ``id``, ``action``, ``actor_id``, ``role``, ``at`` (ISO text), ``details``."""
    by_id = {event.get("id"): event for event in live}
    cursor = 0
    for position, event in enumerate(archived, start=1):
        fields: tuple[str, ...]
        if "id" in event:
            fields = _EVENT_FIELDS
            found = by_id.get(event["id"])
        else:
            fields = _LEGACY_EVENT_FIELDS
            found = None
            for index in range(cursor, len(live)):
                if all(live[index].get(k) == event.get(k) for k in ("action", "role", "at")):
                    found, cursor = live[index], index + 1
                    break
        if found is None:
            return f"{_event_name(event, position)} is missing from the live trail"
        changed = [k for k in fields if canonical_json(found.get(k)) != canonical_json(event.get(k))]
        if changed:
            return f"{_event_name(event, position)} differs from its archived copy ({', '.join(changed)})"
    return None
