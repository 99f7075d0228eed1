"""Stored details in words, for the decision page and its exports: an audit event's details (what
was proposed, which fields changed, what a signature overrode, which record superseded it), the
gate's numbers and the text it stored, the checklist's details, the rollback triggers, the evidence's
versions and hardware, and timestamps. Never a Python repr and never an internal key: criteria by
their titles, checklist items by their questions, proposals by their labels, metrics and settings
as words, numbers through ``console.numbers``, a stored config as JSON.

The gate result and the checklist are stored (and archived) as they were computed; these read them
for display only and never change what is stored or hashed."""

from __future__ import annotations

import ast
import datetime as dt
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from console import numbers
from console.decisions.checklist import QUESTIONS
from console.decisions.gate.constants import (
    DEFAULT_SETTINGS,
    EFFICIENCY_METRIC,
    HIGHER_IS_BETTER,
    LATENCY_METRICS,
    TITLES,
)
from console.decisions.models import Decision
from console.words import LABELS, STAT_LABELS, key_words, listed, plain_pairs, plain_value

PROPOSALS = dict(Decision.Proposal.choices)
VERDICTS = {
    "approved": "approved",
    "approved_with_conditions": "approved with conditions",
    "rejected": "rejected",
}
CHECKLIST_QUESTIONS = dict(QUESTIONS)
COST_BASIS_WORDS = {"busy_time": "busy time", "capacity": "capacity at the SLO"}
# Keys the gate and the checklist write into the text they store, in words (snake_case keys only:
# a one-word key reads the same either way).
STORED_KEY_WORDS: dict[str, str] = {
    **{k: v for k, v in LABELS.items() if "_" in k},
    **{k: key_words(k) for k in DEFAULT_SETTINGS},
    **COST_BASIS_WORDS,
    EFFICIENCY_METRIC: "successes per accelerator-hour",
    "completed_rps": "completed requests per second",
    "output_tokens_per_s": "output tokens per second",
    "response_format": "response format",
    "engine_args": "engine arguments",
    "target_model": "target model",
    "speculative_config": "speculative config",
}
_METRICS = sorted(
    {*LATENCY_METRICS, *HIGHER_IS_BETTER, *(k for k in LABELS if k.endswith(("_s", "_rps")))},
    key=len,
    reverse=True,
)
_STATS = "|".join(STAT_LABELS)
_METRIC_STAT = re.compile(rf"(?<![\w.])({'|'.join(map(re.escape, _METRICS))})(?::| )({_STATS})\b")
_KEYS = re.compile(
    r"(?<![\w.])("
    + "|".join(map(re.escape, sorted((k for k in STORED_KEY_WORDS if "_" in k), key=len, reverse=True)))
    + r")(?![\w])"
)


def audit_details_text(details: Mapping[str, Any] | None) -> str:
    """``details`` of an AuditEvent as one line of words, parts joined by " · "; "" when empty."""
    if not details:
        return ""
    parts: list[str] = []
    for key, value in details.items():
        if value is None or value == [] or value == "" or key in _SAID_BY_LABEL:
            continue
        parts.append(_part(key, value))
    return " · ".join(parts)


# A signature's event says "approval 1 of 2" in its label; the numbers behind it are not repeated.
_SAID_BY_LABEL = ("approvals", "required")


def _part(key: str, value: Any) -> str:
    if key == "label":
        return str(value)
    if key == "status":
        return f"decision {VERDICTS.get(value, _words(value))}"
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
    return STORED_KEY_WORDS.get(str(name)) or key_words(name)


_listed = listed


def checklist_words(key: Any) -> str:
    """A checklist item by its question ("production_traces" -> "The benchmark used production traces …")."""
    return CHECKLIST_QUESTIONS.get(str(key)) or _words(key)


def criterion_words(key: Any) -> str:
    """A gate criterion by its title."""
    return TITLES.get(str(key)) or _words(key)


# --- text the gate and the checklist stored -----------------------------------------------------


def stored_words(text: Any) -> str:
    """Stored gate or checklist text with the internal keys it names in words: "tpot_s p95" and
    "ttft_s:p95" as "TPOT p95", "successes_per_accelerator_hour" as "successes per
    accelerator-hour", a setting or cost basis by its name. Other text (arm labels, task names)
    is left as it is."""
    out = _METRIC_STAT.sub(
        lambda m: f"{_words(m.group(1))} {STAT_LABELS.get(m.group(2), m.group(2))}", str(text)
    )
    return _KEYS.sub(lambda m: STORED_KEY_WORDS[m.group(1)], out)


def stored_segments(text: Any) -> list[tuple[str, bool]]:
    """Stored text as ``(text, is_code)`` pieces: a Python literal it holds (an engine's arguments
    stored as ``{'server': 'x', 'check_server': False}``) becomes its JSON and a field path
    (``engine_args.dtype``) stays as typed, both code pieces; the rest is :func:`stored_words`."""
    value = "" if text is None else str(text)
    pieces: list[tuple[str, bool]] = []
    start = 0
    for begin, end, code in _code_spans(value):
        if begin > start:
            pieces.append((stored_words(value[start:begin]), False))
        pieces.append((code, True))
        start = end
    if start < len(value) or not pieces:
        pieces.append((stored_words(value[start:]), False))
    return pieces


def stored_text(text: Any) -> str:
    """:func:`stored_segments` as one plain string (the PDF)."""
    return "".join(piece for piece, _ in stored_segments(text))


_FIELD_PATH = re.compile(r"(?<![\w./-])[A-Za-z][\w-]*(?:\.[\w-]+)+(?![\w/-])")
_OPENING = re.compile(r"[{\[]")


def _code_spans(text: str) -> list[tuple[int, int, str]]:
    """``(begin, end, code)`` for each Python literal (as JSON) and each dotted field path with an
    underscore (as typed) in ``text``, in order, none overlapping."""
    spans = list(_literals(text))
    for match in _FIELD_PATH.finditer(text):
        inside = any(b <= match.start() < e for b, e, _ in spans)
        if "_" in match.group() and not inside:
            spans.append((match.start(), match.end(), match.group()))
    return sorted(spans)


def _literals(text: str) -> Iterable[tuple[int, int, str]]:
    """``(begin, end, json)`` for each Python dict or list literal in ``text`` whose repr is not
    already its JSON."""
    i = 0
    while True:
        match = _OPENING.search(text, i)
        if match is None:
            return
        begin = match.start()
        end = _closing(text, begin)
        if end is None:
            i = begin + 1
            continue
        try:
            value = ast.literal_eval(text[begin:end])
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            i = begin + 1
            continue
        if not isinstance(value, dict | list | tuple):
            i = begin + 1
            continue
        as_json = json.dumps(value, sort_keys=isinstance(value, dict), default=str, ensure_ascii=False)
        if as_json != text[begin:end]:
            yield begin, end, as_json
        i = end


def _closing(text: str, begin: int) -> int | None:
    """The index just after the bracket that closes the one at ``begin`` (quotes respected)."""
    depth, quote, k = 0, "", begin
    while k < len(text):
        ch = text[k]
        if quote:
            if ch == "\\":
                k += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
            if depth == 0:
                return k + 1
        k += 1
    return None


# --- numbers ------------------------------------------------------------------------------------

_ITEM = re.compile(r"\b(baseline|candidate|delta|lo|hi|floor)\b")
# Units console.numbers.show formats by their own rule (any other unit follows a plain number).
_SHOW_UNITS = frozenset(
    {"s", "ms", "fraction", "%", "rate", "x", "ratio", "change", "pp", "$", "usd", "bytes", "count"}
)


def gate_number_text(number: Mapping[str, Any]) -> str:
    """A gate number row ``{"label", "value", "unit"}`` as text, every item in its unit
    (console.numbers): seconds below one as milliseconds, bytes in GiB, a rate as a percentage, a
    difference of rates in percentage points, a relative change as a signed percentage, a ratio as
    "1.40x"; an item of a "delta [lo, hi]" signed; a missing item a dash."""
    label, value, unit = str(number.get("label") or ""), number.get("value"), str(number.get("unit") or "")
    if not isinstance(value, list | tuple):
        return _item_text(value, unit, _scalar_role(label, unit))
    roles = _ITEM.findall(label.rpartition(":")[2] or label)
    if len(roles) != len(value):
        roles = ["delta" if unit == "fraction" else ""] * len(value)
    return " / ".join(_item_text(v, unit, role) for v, role in zip(value, roles, strict=True)) or numbers.DASH


def _scalar_role(label: str, unit: str) -> str:
    if unit != "fraction":
        return ""
    lowered = label.lower()
    if "difference" in lowered:
        return "delta"
    if "change" in lowered or lowered in ("lower bound", "upper bound"):
        return "change"
    return ""


def _item_text(value: Any, unit: str, role: str) -> str:
    signed = role in ("delta", "lo", "hi")
    if unit == "fraction":
        if role == "change":
            return numbers.DASH if not _finite(value) else numbers.change(1 + float(value))
        if signed or role == "floor":
            return numbers.points(value)
        return numbers.rate(value)
    if unit == "s":
        return numbers.duration(value, signed=signed)
    if (
        unit in ("", "count", "tokens")
        and _finite(value)
        and float(value).is_integer()
        and not isinstance(value, bool)
    ):
        return numbers.count(value, "" if unit == "count" else unit)
    if signed and unit not in _SHOW_UNITS:
        return numbers.number(value, unit, signed=True)
    return numbers.show(value, unit)


def _finite(value: Any) -> bool:
    return numbers.number(value) != numbers.DASH


# Units a trigger's threshold is stored in that mean what ``console.numbers`` means by them; any
# other unit is the one the engineer typed ("ms", "%") and follows the number as typed.
_TRIGGER_UNITS: dict[str, Callable[[Any], str]] = {
    "s": numbers.duration,
    "fraction": numbers.rate,
    "count": numbers.count,
    "bytes": numbers.size,
}


def trigger_value(value: Any, unit: str = "", *, difference: bool = False) -> str:
    """A number in a trigger's unit ("59.0 ms", "35.4%"; another unit follows the number as typed);
    a ``difference`` of two shares (a trigger compared with the control) in percentage points."""
    if difference and unit == "fraction":
        return numbers.points(value)
    return _TRIGGER_UNITS[unit](value) if unit in _TRIGGER_UNITS else numbers.number(value, unit)


def trigger_condition(trigger: Mapping[str, Any]) -> str:
    """A rollback trigger's condition: "> 59.0 ms", "< 35.4%", "> 4.0 ms over the control"."""
    control = trigger.get("compare") == "control"
    shown = trigger_value(trigger.get("threshold"), str(trigger.get("unit") or ""), difference=control)
    return f"{trigger.get('op', '')} {shown}{' over the control' if control else ''}".strip()


def trigger_text(trigger: Mapping[str, Any]) -> str:
    """A rollback trigger in one line: "p95 TPOT (interactive) > 59.0 ms for 10 min"; one a rollout
    can evaluate says its looks and action ("> 4.00 ms over the control, looked at every 2 min
    (5 looks before a breach, then pause)")."""
    window = numbers.number(trigger.get("window_min"))
    if not trigger.get("query"):
        return f"{trigger.get('metric', '')} {trigger_condition(trigger)} for {window} min"
    return (
        f"{trigger.get('metric', '')} {trigger_condition(trigger)}, looked at every {window} min"
        f" ({numbers.count(trigger.get('min_samples'))} looks before a breach, then {trigger.get('action') or 'pause'})"
    )


def setting_value_text(value: Any) -> str:
    """A gate setting's value as the JSON one would type ("0.97", "{"*": 0.2}", "null")."""
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


# --- time ---------------------------------------------------------------------------------------


def utc_text(value: Any) -> str:
    """A time (a datetime or a stored ISO 8601 text) as "2026-12-04 10:23 UTC"; a dash for none."""
    if value in (None, ""):
        return numbers.DASH
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            return value
    if not isinstance(value, dt.datetime):
        return str(value)
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
    return f"{value:%Y-%m-%d %H:%M} UTC"


__all__ = [
    "audit_details_text",
    "checklist_words",
    "criterion_words",
    "gate_number_text",
    "plain_pairs",
    "plain_value",
    "setting_value_text",
    "stored_segments",
    "stored_text",
    "stored_words",
    "trigger_condition",
    "trigger_text",
    "trigger_value",
    "utc_text",
]
