"""What a worker hands in, made storable: a run's result rows and telemetry as Postgres accepts
them, and a note of every change so the run's error says what was altered."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from console.results.arrays import ArrayPackError, pack
from console.results.models import RequestResult
from console.results.selectors import ARRAY_FIELDS


@dataclass
class Sanitised:
    """What the store changed so that a row could be written at all."""

    notes: dict[str, int] = field(default_factory=dict)

    def note(self, what: str) -> None:
        self.notes[what] = self.notes.get(what, 0) + 1

    def text(self, value: str | None, *, what: str, max_length: int | None = None) -> str | None:
        if value is None:
            return None
        if "\x00" in value:
            value = value.replace("\x00", "")
            self.note(f"NUL bytes removed from {what}")
        if max_length is not None and len(value) > max_length:
            value = value[:max_length]
            self.note(f"{what} cut to {max_length} characters")
        return value

    def json(self, value: Any, *, what: str) -> Any:
        """JSON Postgres accepts: no NUL in strings, no NaN or infinities (stored as null)."""
        if isinstance(value, str):
            return self.text(value, what=what)
        if isinstance(value, float) and not math.isfinite(value):
            self.note(f"non-finite numbers in {what} stored as null")
            return None
        if isinstance(value, dict):
            return {str(self.text(str(k), what=what)): self.json(v, what=what) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.json(v, what=what) for v in value]
        return value

    def array(self, value: Any, *, kind: str, what: str) -> Any:
        """A per-request array the packed field stores (``console.results.arrays``): returned
        as is when it packs; one that cannot (not a flat list of numbers) is stored empty and
        noted, so one malformed row never loses the run. NaN and infinities store as they are."""
        try:
            pack(value, kind=kind, what=what)
        except ArrayPackError:
            self.note(f"{what} not a flat list of numbers, stored empty")
            return []
        return value

    def summary(self) -> str:
        if not self.notes:
            return ""
        return "stored with changes: " + "; ".join(f"{what} ({n}x)" for what, n in sorted(self.notes.items()))


def result_rows_sanitise(*, rows: Iterable[RequestResult], sanitised: Sanitised) -> list[RequestResult]:
    """Make unsaved ``RequestResult`` rows storable: strip NUL bytes, cut over-long fields."""
    limits = {f.name: f.max_length for f in RequestResult._meta.fields if getattr(f, "max_length", None)}
    out = []
    for row in rows:
        for name in ("output_text", "error", "finish_reason", "request_id"):
            setattr(row, name, sanitised.text(getattr(row, name), what=name, max_length=limits.get(name)))
        for name, kind in ARRAY_FIELDS.items():
            setattr(row, name, sanitised.array(getattr(row, name), kind=kind, what=name))
        out.append(row)
    return out
