"""Rollback triggers as data: what each one is, how it is checked, typed and read.

A trigger is a JSON object::

    {"metric": "p95 TPOT (interactive)",   # its name, shown everywhere
     "op": ">", "threshold": 0.004,         # breach when the value is beyond the threshold
     "unit": "s",                           # s, fraction, count, bytes, or what was typed
     "window_min": 2,                       # each look covers this many minutes (> 0)
     "compare": "control",                  # control: candidate minus the control pool; absolute
     "query": "histogram_quantile(0.95, sum by (le) (rate(vllm:..._bucket{$pool}[$window])))",
     "min_samples": 5,                      # looks with data before a breach may be declared
     "action": "pause"}                     # pause, or rollback (recommend it; call the revert hook)

``$pool`` in the query stands for a pool's label matchers (the rollout says which select the
candidate's and the control's pods), ``$window`` for ``window_min`` as a Prometheus duration. A
trigger without a query is still a plan a person reads, but nothing can evaluate or export it.
Triggers written before these fields existed read as ``compare: absolute``, no query,
``min_samples`` 3 and ``action: pause`` (``trigger_full``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

OPS = (">", ">=", "<", "<=")
COMPARES = ("control", "absolute")
ACTIONS = ("pause", "rollback")
DEFAULTS: dict[str, Any] = {
    "unit": "",
    "compare": "absolute",
    "query": "",
    "min_samples": 3,
    "action": "pause",
}
METRIC_MAX_CHARS = 200
UNIT_MAX_CHARS = 40
QUERY_MAX_CHARS = 2000
MIN_SAMPLES_MAX = 1000
FIELDS = ("metric", "op", "threshold", "unit", "window_min", "compare", "query", "min_samples", "action")
LINE_FORMAT = "metric | op | threshold | unit | window minutes [| compare | min looks | action | query]"


class TriggerError(ValueError):
    """A trigger that is not one; the message names the field."""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def trigger_problems(trigger: Any) -> list[str]:
    """What is wrong with one trigger (empty when nothing is), each naming its field."""
    if not isinstance(trigger, Mapping):
        return ["a trigger is an object with metric, op, threshold, unit and window_min"]
    problems = []
    unknown = sorted(set(map(str, trigger)) - set(FIELDS))
    if unknown:
        problems.append(f"unknown field(s) {', '.join(unknown)[:200]}: a trigger has {', '.join(FIELDS)}")
    metric = trigger.get("metric")
    if not isinstance(metric, str) or not metric.strip() or len(metric) > METRIC_MAX_CHARS:
        problems.append(f"metric: a name of 1 to {METRIC_MAX_CHARS} characters")
    if trigger.get("op") not in OPS:
        problems.append(f"op: one of {' '.join(OPS)}")
    if not _number(trigger.get("threshold")):
        problems.append("threshold: a finite number")
    window: Any = trigger.get("window_min")
    if not _number(window) or window <= 0:
        problems.append("window_min: a positive number of minutes")
    unit = trigger.get("unit", "")
    if not isinstance(unit, str) or len(unit) > UNIT_MAX_CHARS:
        problems.append(f"unit: at most {UNIT_MAX_CHARS} characters")
    compare = trigger.get("compare", DEFAULTS["compare"])
    if compare not in COMPARES:
        problems.append(f"compare: one of {', '.join(COMPARES)}")
    query = trigger.get("query", "")
    if not isinstance(query, str) or len(query) > QUERY_MAX_CHARS or "\n" in query or "\r" in query:
        problems.append(f"query: one line of PromQL, at most {QUERY_MAX_CHARS} characters")
    elif compare == "control" and query and "$pool" not in query:
        problems.append("query: compared with the control, it must select a pool with $pool")
    elif compare == "control" and not query:
        problems.append("query: a comparison with the control needs the PromQL query run on both pools")
    samples: Any = trigger.get("min_samples", DEFAULTS["min_samples"])
    if not (isinstance(samples, int) and not isinstance(samples, bool) and 1 <= samples <= MIN_SAMPLES_MAX):
        problems.append(f"min_samples: a whole number of looks from 1 to {MIN_SAMPLES_MAX}")
    if trigger.get("action", DEFAULTS["action"]) not in ACTIONS:
        problems.append(f"action: one of {', '.join(ACTIONS)}")
    return problems


def trigger_valid(trigger: Any) -> bool:
    return not trigger_problems(trigger)


def triggers_check(triggers: Any) -> list[dict[str, Any]]:
    """Every trigger complete (``trigger_full``), or ``TriggerError`` naming the first bad one."""
    if not isinstance(triggers, list):
        raise TriggerError("rollback_triggers: a list of triggers")
    out = []
    for n, trigger in enumerate(triggers, start=1):
        problems = trigger_problems(trigger)
        if problems:
            raise TriggerError(f"rollback_triggers, trigger {n}: {'; '.join(problems)}")
        out.append(trigger_full(trigger))
    return out


def trigger_full(trigger: Mapping[str, Any]) -> dict[str, Any]:
    """The trigger with every field, defaults where it was written without them."""
    return {key: trigger.get(key, DEFAULTS.get(key)) for key in FIELDS}


def trigger_evaluable(trigger: Mapping[str, Any]) -> bool:
    """Whether a rollout can evaluate it (and an export carry it): it has a query."""
    return bool(str(trigger.get("query") or "").strip())


def _plain(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def trigger_line_parse(line: str, *, n: int) -> dict[str, Any]:
    """One typed line (``LINE_FORMAT``); the query comes last and may itself hold ``|``."""
    parts = [p.strip() for p in line.split("|", 8)]
    if len(parts) not in (5, 9):
        raise TriggerError(f"line {n}: write '{LINE_FORMAT}' (5 or all 9 fields)")
    trigger: dict[str, Any] = {"metric": parts[0], "op": parts[1], "unit": parts[3]}
    try:
        trigger["threshold"] = _plain(float(parts[2]))
        trigger["window_min"] = _plain(float(parts[4]))
    except ValueError:
        raise TriggerError(f"line {n}: threshold and window must be numbers") from None
    if len(parts) == 9:
        trigger["compare"], trigger["action"], trigger["query"] = parts[5], parts[7], parts[8]
        try:
            trigger["min_samples"] = int(parts[6])
        except ValueError:
            raise TriggerError(f"line {n}: min looks must be a whole number") from None
    problems = trigger_problems(trigger)
    if problems:
        raise TriggerError(f"line {n}: {'; '.join(problems)}")
    return trigger_full(trigger)


def triggers_text_parse(text: str) -> list[dict[str, Any]]:
    return [
        trigger_line_parse(line, n=n) for n, line in enumerate(text.splitlines(), start=1) if line.strip()
    ]


def triggers_text(triggers: list[Mapping[str, Any]]) -> str:
    """The typed form of stored triggers (the edit form's text); a trigger written with its
    defaults only is one short line."""
    lines = []
    for t in triggers or []:
        full = trigger_full(t)
        threshold = "" if full["threshold"] is None else full["threshold"]
        line = f"{full['metric'] or ''} | {full['op'] or '>'} | {threshold} | {full['unit'] or ''} | {full['window_min'] or ''}"
        if any(full[k] != DEFAULTS[k] for k in ("compare", "query", "min_samples", "action")):
            line += f" | {full['compare']} | {full['min_samples']} | {full['action']} | {full['query']}"
        lines.append(line)
    return "\n".join(lines)
