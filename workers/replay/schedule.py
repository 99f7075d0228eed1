"""What a replay checks before it sends anything, and how a session's later turn is sent.

A replay is refused at once (ValueError) when its specs cannot be replayed as given, before any
warm-up. A session's turns are 0, 1, 2, ... once each; turn k + 1 follows turn k within its
session, sent as the conversation so far with this replay's own answers in it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from workers.engines.base import EngineRequest

from .records import RequestSpec


def specs_validate(
    *, specs: Sequence[RequestSpec], rate_multiplier: float, concurrency_cap: int | None
) -> None:
    """ValueError, saying which request, unless the specs can be replayed as given: at least one,
    unique ids, finite arrivals >= 0, a positive rate multiplier, a cap of at least 1 or None."""
    if not specs:
        raise ValueError("nothing to replay: no requests")
    if not (rate_multiplier > 0 and math.isfinite(rate_multiplier)):
        raise ValueError(f"rate_multiplier must be a positive number, got {rate_multiplier!r}")
    if concurrency_cap is not None and concurrency_cap < 1:
        raise ValueError(f"concurrency_cap must be at least 1 or None, got {concurrency_cap!r}")
    ids = [s.request.request_id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError("request ids must be unique within a replay")
    for spec in specs:
        if not (spec.arrival_s >= 0 and math.isfinite(spec.arrival_s)):
            raise ValueError(
                f"request {spec.request.request_id}: arrival_s must be >= 0, got {spec.arrival_s!r}"
            )


def next_turns(specs: Sequence[RequestSpec]) -> dict[int, int]:
    """Index of each session turn -> index of the same session's next turn; ValueError unless
    every session's turns are 0, 1, 2, ... once each, with finite think times >= 0."""
    sessions: dict[str, dict[int, int]] = {}
    for i, spec in enumerate(specs):
        if spec.session_id is None:
            if spec.turn:
                raise ValueError(f"request {spec.request.request_id}: turn {spec.turn} without a session")
            continue
        turns = sessions.setdefault(spec.session_id, {})
        if spec.turn in turns:
            raise ValueError(f"session {spec.session_id!r}: turn {spec.turn} appears twice")
        if not (spec.think_time_s >= 0 and math.isfinite(spec.think_time_s)):
            raise ValueError(
                f"request {spec.request.request_id}: think_time_s must be >= 0, got {spec.think_time_s!r}"
            )
        turns[spec.turn] = i
    out: dict[int, int] = {}
    for session_id, turns in sessions.items():
        if sorted(turns) != list(range(len(turns))):
            raise ValueError(
                f"session {session_id!r}: turns must be 0, 1, 2, ... without a gap, got {sorted(turns)}"
            )
        for turn in range(len(turns) - 1):
            out[turns[turn]] = turns[turn + 1]
    return out


def turn_request(*, previous: EngineRequest, answer: str, request: EngineRequest) -> EngineRequest:
    """A later turn as sent: the previous turn as it was sent, this replay's ``answer`` to it (an
    assistant message), then the later turn's own new message(s). Text prompts (completions API)
    are joined as text; a mix becomes chat messages."""
    if previous.messages is None and request.messages is None:
        return dataclasses.replace(request, prompt=(previous.prompt or "") + answer + (request.prompt or ""))
    history = previous.messages or [{"role": "user", "content": previous.prompt or ""}]
    new = request.messages or [{"role": "user", "content": request.prompt or ""}]
    messages = [*history, {"role": "assistant", "content": answer}, *new]
    return dataclasses.replace(request, prompt=None, messages=messages)
