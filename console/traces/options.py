"""The import options a user typed: checked against what the columns hold (never a database error),
parsed, and recorded; the record and the file's sha256 make the import key (one file imported once
per set of options)."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from console.traces.arrivals import ArrivalSpec, ArrivalSpecError, arrival_spec_parse
from console.traces.errors import TraceError, TraceImportError
from console.traces.importer import ImportOptions
from console.traces.models import Trace, TraceRequest
from console.traces.sessions import (
    ThinkTimeSpec,
    ThinkTimeSpecError,
    think_time_spec_parse,
    turns_option_problem,
)

SEED_MAX = 2**63 - 1  # Trace.seed and TraceRequest.seed are 64-bit signed columns
NAME_MAX_CHARS = Trace._meta.get_field("name").max_length or 200
TASK_MAX_CHARS = TraceRequest._meta.get_field("task").max_length or 60


def import_options_parse(
    *,
    name: str,
    holdout_fraction: float,
    seed: int,
    default_max_tokens: int,
    default_task: str | None,
    ceiling: int,
    arrival: str | None,
    turns: str,
    think_time: str | None,
) -> tuple[ArrivalSpec | None, ThinkTimeSpec | None]:
    """The arrival process and the think time, parsed; every bad option is raised at once
    (``TraceImportError``). ``ceiling``: the largest max_tokens a request may ask for (tokens)."""
    bad = _option_errors(
        name=name,
        holdout_fraction=holdout_fraction,
        seed=seed,
        default_max_tokens=default_max_tokens,
        default_task=default_task,
        ceiling=ceiling,
    )
    spec: ArrivalSpec | None = None
    if arrival:
        try:
            spec = arrival_spec_parse(arrival)
        except ArrivalSpecError as exc:
            bad.append(TraceError(None, "arrival", str(exc)))
    think: ThinkTimeSpec | None = None
    problem = turns_option_problem(turns)
    if problem:
        bad.append(TraceError(None, "turns", problem))
    if think_time:
        try:
            think = think_time_spec_parse(think_time)
        except ThinkTimeSpecError as exc:
            bad.append(TraceError(None, "think_time", str(exc)))
    if bad:
        raise TraceImportError(bad)
    return spec, think


def _option_errors(
    *,
    name: str,
    holdout_fraction: float,
    seed: int,
    default_max_tokens: int,
    default_task: str | None,
    ceiling: int,
) -> list[TraceError]:
    bad: list[TraceError] = []
    if len(name.strip()) > NAME_MAX_CHARS:
        bad.append(
            TraceError(
                None, "name", f"must have at most {NAME_MAX_CHARS} characters, got {len(name.strip())}"
            )
        )
    if not (0.0 <= holdout_fraction <= 1.0) or not math.isfinite(holdout_fraction):
        bad.append(TraceError(None, "holdout", f"must be between 0 and 1, got {holdout_fraction}"))
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        bad.append(
            TraceError(None, "seed", f"must be an integer from 0 to {SEED_MAX} (2^63 - 1), got {seed}")
        )
    if (
        isinstance(default_max_tokens, bool)
        or not isinstance(default_max_tokens, int)
        or not (1 <= default_max_tokens <= ceiling)
    ):
        bad.append(
            TraceError(
                None,
                "default_max_tokens",
                f"must be an integer from 1 to {ceiling} (SPECREVIEW_MAX_TOKENS_CEILING), got {default_max_tokens}",
            )
        )
    if default_task is not None and len(default_task) > TASK_MAX_CHARS:
        bad.append(
            TraceError(
                None, "task", f"must have at most {TASK_MAX_CHARS} characters, got {len(default_task)}"
            )
        )
    return bad


def import_options_record(options: ImportOptions, *, pair_with: str | None) -> dict[str, Any]:
    """The options as stored in the trace's metadata and hashed into its import key (before the
    sources they name are resolved). Options added later appear only when given, so traces imported
    before them keep their keys."""
    record: dict[str, Any] = {
        "format": options.source_format,
        "arrival": str(options.arrival) if options.arrival else "",
        "pair_with": str(pair_with or ""),
        "holdout": options.holdout_fraction,
        "seed": options.seed,
        "default_max_tokens": options.default_max_tokens,
        "default_task": options.default_task or "",
        "tokens": options.token_counter_name,
    }
    if options.mapping is not None:
        record["mapping"] = options.mapping.as_dict()
    if options.redactor is not None:
        record["redact"] = [kind.pattern.pattern for kind in options.redactor.extra]
    if options.turns != "first" or options.think_time is not None:
        record["turns"] = options.turns
        record["think_time"] = str(options.think_time) if options.think_time else ""
    return record


def import_key(sha256: str, options: dict[str, Any]) -> str:
    """The key one file (its sha256) imported with one set of options is stored under."""
    return hashlib.sha256(f"{sha256}\n{json.dumps(options, sort_keys=True)}".encode()).hexdigest()
