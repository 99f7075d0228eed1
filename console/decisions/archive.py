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
BUNDLE_SCHEMA = "specreview.decision-bundle/1"


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
    bundle's ``decision`` and ``signoff`` sections. Returns ``{"ok", "checked", "break"}`` where
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
                for section in ("decision", "signoff"):
                    if canonical_json(rec["live"].get(section)) != canonical_json(bundle.get(section)):
                        reason = f"the {section} row in the database differs from its archived bundle"
                        break
        if reason:
            return {"ok": False, "checked": checked, "break": where | {"reason": reason}}
        previous = rec["record_sha256"]
        checked += 1
    return {"ok": True, "checked": checked, "break": None}
