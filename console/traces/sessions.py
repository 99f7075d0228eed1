"""Sessions: multi-turn conversations in a trace (see docs/trace-format.md, Sessions).

A session is the turns of one conversation: turn 0 arrives at its ``arrival_s`` (open loop), turn
k + 1 ``think_time_s`` seconds after turn k's answer finished, and carries that answer in its
messages (built at replay time, workers/replay/schedule.py). A request without a session is a session of
one turn keyed by its own id.

Think-time specs (seconds), for prompt sets imported with ``--turns all`` and native later turns
that give none:
- ``const:SECONDS``: the same think time for every later turn.
- ``exp:MEAN``: exponential think times with mean MEAN seconds.
- ``none``: 0 s (the next turn is sent as soon as the answer finished).

A think time depends only on the trace seed, the session id and the turn (a stable hash), never on
file order, so re-importing gives every turn the same think time.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from console.traces.errors import ErrorLog

TURNS = ("first", "all")
THINK_KINDS = ("const", "exp", "none")
DEFAULT_THINK_TIME = "none"


class ThinkTimeSpecError(ValueError):
    pass


@dataclass(frozen=True)
class ThinkTimeSpec:
    kind: str  # const | exp | none
    seconds: float = 0.0  # the constant, or the exponential's mean

    def __str__(self) -> str:
        return "none" if self.kind == "none" else f"{self.kind}:{self.seconds:g}"

    def sample(self, *, seed: int, session_id: str, turn: int) -> float:
        """Seconds of think time before ``turn`` of ``session_id`` (a pure function of its arguments)."""
        if self.kind == "none":
            return 0.0
        if self.kind == "const":
            return self.seconds
        digest = hashlib.blake2b(f"think:{seed}\x1f{session_id}\x1f{turn}".encode(), digest_size=8).digest()
        u = (int.from_bytes(digest, "big") + 0.5) / 2.0**64  # in (0, 1): the log below is finite
        return -self.seconds * math.log(u)


def think_time_spec_parse(spec: str) -> ThinkTimeSpec:
    """Parse ``const:SECONDS``, ``exp:MEAN`` (seconds) or ``none``."""
    text = spec.strip()
    kind, _, rest = text.partition(":")
    kind = kind.lower()
    if kind == "none" and not rest:
        return ThinkTimeSpec("none")
    if kind not in ("const", "exp"):
        raise ThinkTimeSpecError(
            f"{spec!r} is not a think-time distribution: use const:SECONDS, exp:MEAN_SECONDS or none"
        )
    try:
        seconds = float(rest)
    except ValueError:
        raise ThinkTimeSpecError(f"{spec!r}: use {kind}:SECONDS (a number of seconds)") from None
    if not math.isfinite(seconds) or seconds < 0 or (kind == "exp" and seconds == 0):
        raise ThinkTimeSpecError(
            f"{spec!r}: the seconds must be a finite number {'> 0' if kind == 'exp' else '>= 0'}, got {rest}"
        )
    return ThinkTimeSpec(kind, seconds)


def turns_option_problem(turns: str) -> str | None:
    return None if turns in TURNS else f"must be 'first' or 'all', got {turns!r}"


class SessionChecker:
    """Checks that every session's turns are 0, 1, 2, ... with no repeat, gap or missing first turn.

    Keeps, per session, the line of each turn: a bare line number for a session of one turn (most
    traces: a few bytes a request beside the id set), a {turn: line} dict once it has more; and
    each first turn's arrival while later turns may still need it. A duplicate is reported at
    once, gaps and missing first turns at ``finish``.
    """

    def __init__(self) -> None:
        self.lines: dict[str, int | dict[int, int]] = {}
        self.starts: dict[str, float] = {}
        self.later = 0  # requests with turn > 0

    def _turns(self, session_id: str) -> dict[int, int]:
        held = self.lines.get(session_id)
        if held is None:
            return {}
        return {0: held} if isinstance(held, int) else held

    def duplicate(self, *, session_id: str, turn: int) -> int | None:
        """The line that already holds this (session, turn), or None."""
        held = self.lines.get(session_id)
        if held is None or isinstance(held, int):
            return held if turn == 0 else None
        return held.get(turn)

    def add(self, *, session_id: str, turn: int, line: int, arrival_s: float | None, explicit: bool) -> None:
        """``explicit``: the request named its session (only those can have later turns after them)."""
        held = self.lines.get(session_id)
        if held is None and turn == 0:
            self.lines[session_id] = line
        else:
            turns = self._turns(session_id)
            turns[turn] = line
            self.lines[session_id] = turns
        if turn:
            self.later += 1
        elif explicit and arrival_s is not None:
            self.starts[session_id] = arrival_s

    def start(self, session_id: str) -> float | None:
        """The first turn's arrival (s), if that turn was read already and named its session."""
        return self.starts.get(session_id)

    def finish(self, errors: ErrorLog) -> None:
        for session_id, held in self.lines.items():
            if isinstance(held, int) or len(held) == max(held) + 1:
                continue  # 0..n-1, each once
            ordered = sorted(held)
            if ordered[0] != 0:
                errors.add(
                    held[ordered[0]],
                    "turn",
                    f"session {session_id!r} has no turn 0: turn {ordered[0]} is its earliest "
                    "(a later turn needs the first turn of its session)",
                )
                continue
            for before, after in zip(ordered, ordered[1:], strict=False):
                if after != before + 1:
                    missing = ", ".join(str(t) for t in range(before + 1, after))
                    errors.add(
                        held[after],
                        "turn",
                        f"session {session_id!r} skips from turn {before} to turn {after}: "
                        f"turn {missing} is missing",
                    )

    @property
    def count(self) -> int:
        return len(self.lines)

    @property
    def multi_turn(self) -> int:
        return sum(isinstance(held, dict) and len(held) > 1 for held in self.lines.values())

    @property
    def turns_max(self) -> int:
        return max((1 if isinstance(held, int) else len(held) for held in self.lines.values()), default=0)
