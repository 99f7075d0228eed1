"""The import pipeline without the database: parse, give arrivals and content, validate, normalise.

``TraceBuilder.rows()`` streams, per accepted request, a tuple in ``ROW_FIELDS`` order and the JSON
text of its JSON columns (``JSON_FIELDS`` order) while it collects errors, warnings, a summary
(summary.py) and the content hash; services.py stores the rows in one transaction (store.py). State
kept per request is one id string (duplicate check); the file's content is never held in memory.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from console.traces.arrival_assignment import ArrivalAssigner
from console.traces.arrivals import ArrivalSpec
from console.traces.columns import NotFiniteError, content_key, json_texts
from console.traces.errors import ErrorLog
from console.traces.pairing import PromptPool, record_pair
from console.traces.parsers import PARSERS, REQUESTS, TIMING, ParseContext, Record
from console.traces.redaction import RedactionError, Redactor, record_redact
from console.traces.sessions import SessionChecker, ThinkTimeSpec
from console.traces.splits import split_assigner, split_trace_key
from console.traces.summary import Summary
from console.traces.tokens import ESTIMATE_NAME, TokenCounter, prompt_tokens
from console.traces.validation import request_schema_errors, request_semantic_errors

_MOD = 1 << 256
# A JSON string may escape half of a UTF-16 pair on its own ("\\ud800"): Python decodes it to a
# code point that is no character, which UTF-8 (the hash, the database) cannot encode.
_SURROGATE = re.compile("[\ud800-\udfff]")
SURROGATE_MESSAGE = (
    "contains a lone UTF-16 surrogate (an escape such as \\ud800 without its pair), which is not "
    "a character: write the character itself, or both halves of its pair"
)


@dataclass
class ImportOptions:
    """How to import. Rates are requests/s, times seconds, lengths tokens."""

    source_format: str
    arrival: ArrivalSpec | None = None
    borrowed_arrivals: list[float] | None = None
    pool: PromptPool | None = None
    holdout_fraction: float = 0.3
    seed: int = 0
    default_max_tokens: int = 256
    default_task: str | None = None
    max_tokens_ceiling: int = 32768
    token_counter: TokenCounter | None = None
    token_counter_name: str = ESTIMATE_NAME
    error_cap: int = 100
    mapping: Any = None  # parsers.mapped.FieldMapping: where a field-mapped prompt set keeps its fields
    turns: str = "first"  # multi-turn prompt sets: "first" turn only, or "all" turns as sessions
    think_time: ThinkTimeSpec | None = None  # for later turns that carry none (seconds)
    redactor: Redactor | None = None  # redaction at import: every request's text, before it is stored


class TraceBuilder:
    def __init__(self, file: IO[bytes], *, filename: str, options: ImportOptions):
        self.file = file
        self.filename = filename
        self.options = options
        self.errors = ErrorLog(file=filename, cap=options.error_cap)
        parser_cls = PARSERS[options.source_format]
        self.parser = parser_cls()
        self.kind = parser_cls.kind
        self.ctx = ParseContext(
            file=filename,
            errors=self.errors,
            default_max_tokens=options.default_max_tokens,
            default_task=options.default_task,
            mapping=options.mapping,
            turns=options.turns,
        )
        self.summary = Summary()
        self.warnings: list[str] = []
        self.out_of_order = 0
        self.shift_s = 0.0  # added to every arrival after the fact (clock traces with early stragglers)
        self.content_hash = 0
        self.arrival_label = "trace"
        self._ids: set[str] = set()
        self.sessions = SessionChecker()
        self.later_turns = 0
        self._split_of = split_assigner(
            trace_key=split_trace_key(seed=options.seed), holdout_fraction=options.holdout_fraction
        )
        # while rows stream: the latest arrival in file order (s), the rows built so far
        self._last_arrival = -math.inf
        self._index = 0

    # --- the pipeline ---------------------------------------------------------------------------
    def rows(self) -> Iterator[tuple[tuple, tuple]]:
        """Per stored request, its row (``ROW_FIELDS`` order) and the JSON text of its JSON columns
        (``JSON_FIELDS`` order). Each record is timed, paired (timing traces), checked and built; after
        the first error the rest of the file is still checked, to report every bad line, but nothing
        more is built. The summary and content hash stand as far as the rows went, even if the caller
        stops early; the file-level checks and warnings (``_finish``) follow a full read."""
        opts = self.options
        if self.kind == TIMING and opts.pool is None:
            self.errors.add(
                None,
                None,
                f"{PARSERS[opts.source_format].label} has timing but no prompts: give a prompt pool to pair "
                "with (--pair-with), so content-less requests never pass as real ones",
            )
            return
        arrivals = ArrivalAssigner(
            kind=self.kind,
            spec=opts.arrival,
            borrowed=opts.borrowed_arrivals,
            seed=opts.seed,
            needs_timestamp=self.kind == REQUESTS and opts.source_format != "native",
            errors=self.errors,
            warnings=self.warnings,
        )
        self.arrival_label = arrivals.label
        if self.errors:
            return
        errors = self.errors
        timing = self.kind == TIMING
        # bound once: the loop below runs per request
        assign, accept, build, notes = arrivals.assign, self._accept, self._build, self.ctx.notes
        try:
            for record in self.parser.parse(self.file, self.ctx):
                if record.output_tokens == 0:
                    notes["skipped_failed"] += 1
                    continue
                timed, clock_arrival = assign(record, self._index)
                if not timed:
                    continue
                if timing:
                    assert opts.pool is not None
                    record_pair(record, pool=opts.pool, seed=opts.seed)
                accepted = accept(record, clock_arrival)
                if accepted is None or errors.errors or errors.more:
                    continue
                built = build(record, accepted, clock_arrival)
                if built is not None:
                    yield built
        finally:
            self.content_hash %= _MOD
        self._finish()

    def _accept(self, record: Record, clock_arrival: float | None) -> tuple[str, str, int] | None:
        """(request id, session id, turn) of a record that passes every check, now registered with
        its session; None (its problems reported) otherwise."""
        data = record.data
        problems, request_id, session_id, turn = self._problems(data)
        if problems:
            add_error = self.errors.add
            for path, message in problems:
                add_error(record.line, path or None, message)
            return None
        self._ids.add(request_id)
        sessions = self.sessions
        if turn == 0 and "session_id" not in data and session_id not in sessions.lines:
            sessions.lines[session_id] = record.line  # what sessions.add does for a request of its own
        else:
            sessions.add(
                session_id=session_id,
                turn=turn,
                line=record.line,
                arrival_s=None
                if turn
                else (clock_arrival if clock_arrival is not None else data["arrival_s"]),
                explicit="session_id" in data,
            )
        return request_id, session_id, turn

    def _problems(self, data: dict[str, Any]) -> tuple[list[tuple[str, str]], str, str, int]:
        """The record's problems (the schema, then what a schema cannot say, then its id and turn
        against the requests before it), with its request id, session id and turn."""
        problems = request_schema_errors(data)
        if not problems:
            problems = request_semantic_errors(data, max_tokens_ceiling=self.options.max_tokens_ceiling)
        request_id = str(data.get("id"))
        if request_id in self._ids:
            problems.append(("id", f"duplicate id {request_id!r} (ids must be unique within a trace)"))
        session_id = str(data.get("session_id", request_id))
        if problems:  # the turn may be anything then (the schema said so): it is not read
            return problems, request_id, session_id, 0
        turn = int(data.get("turn") or 0)
        sessions = self.sessions
        # None: the session's first request (most are), with no turn before it to repeat
        seen = (
            None if session_id not in sessions.lines else sessions.duplicate(session_id=session_id, turn=turn)
        )
        if seen is not None:
            problems.append(
                ("turn", f"duplicate turn {turn} of session {session_id!r} (line {seen} has it already)")
            )
        elif turn and "arrival_s" not in data:
            start = sessions.start(session_id)
            if start is None:
                problems.append(
                    (
                        "arrival_s",
                        f"is missing, and no turn 0 with session_id {session_id!r} is before this "
                        "line: list a session's turns in order, or give the later turn an arrival_s",
                    )
                )
            else:
                data["arrival_s"] = start  # nominal (for ordering): the replay uses think_time_s
        return problems, request_id, session_id, turn

    def _build(
        self, record: Record, accepted: tuple[str, str, int], clock_arrival: float | None
    ) -> tuple[tuple, tuple] | None:
        """The row and JSON texts of an accepted record, counted into the summary and content hash;
        None (the problem reported) if what it holds cannot be stored."""
        data = record.data
        line = record.line
        if self.options.redactor is not None:
            try:
                data = record_redact(data, redactor=self.options.redactor)
            except RedactionError as exc:
                self.errors.add(line, None, str(exc))
                return None
        if clock_arrival is not None:
            if not math.isfinite(clock_arrival):
                self.errors.add(
                    line, "timestamp", "is too far from the first request's (not a finite offset)"
                )
                return None
            data["arrival_s"] = clock_arrival
        request_id, session_id, _ = accepted
        for field, value in (("id", request_id), ("session_id", session_id)):
            # before the row: its split is a hash of the session id (isascii: the common case, fast)
            if not value.isascii() and _SURROGATE.search(value):
                self.errors.add(line, field, SURROGATE_MESSAGE)
                return None
        row = self._row(data, *accepted)
        try:
            texts = json_texts(row)
        except NotFiniteError as exc:
            self.errors.add(line, exc.field, NotFiniteError.message)
            return None
        key = content_key(row, texts)
        if "\x00" in key or "\\u0000" in key:
            self.errors.add(line, None, "contains a NUL character (\\u0000), which cannot be stored")
            return None
        try:
            encoded = key.encode()  # the bytes hashed; a lone surrogate has none in UTF-8
        except UnicodeEncodeError:
            self.errors.add(line, _surrogate_field(row, texts), SURROGATE_MESSAGE)
            return None
        self._count(row, encoded)
        self._index += 1
        return row, texts

    def _row(self, data: dict[str, Any], request_id: str, session_id: str, turn: int) -> tuple:
        """The record as its columns (``ROW_FIELDS`` order), the import's options applied: prompt tokens
        by its counter, split by its seed, think time by its spec; position and source index are the
        file order (renumbered by arrival afterwards if out of order)."""
        prompt = data.get("prompt")
        messages = data.get("messages")
        metadata = data.get("metadata") or {}
        tokens = prompt_tokens(prompt=prompt, messages=messages, token_counter=self.options.token_counter)
        if self.kind == TIMING:
            metadata["paired"]["prompt_tokens"] = tokens
        seed = data.get("seed")
        if type(seed) is float:
            seed = int(seed)  # an integral float (5.0) passes the schema; the column is an integer
        index = self._index
        return (
            index,
            request_id,
            float(data["arrival_s"]),
            prompt,
            messages,
            int(data["max_tokens"]),
            data.get("temperature"),
            data.get("top_p"),
            seed,
            data.get("task") or "unknown",
            data.get("class") or "interactive",
            data.get("response_format"),
            data.get("tools"),
            metadata,
            tokens,
            self._split_of(session_id),  # keyed by the session: all its turns fall in one split
            index,
            session_id,
            turn,
            self._think_time(data, session_id, turn) if turn else 0.0,
        )

    def _count(self, row: tuple, key: bytes) -> None:
        """Add a stored request to the content hash (the sha256 of its key's UTF-8 bytes, summed
        mod 2**256 at the end: file order does not matter), the sort check and the summary."""
        self.content_hash += int.from_bytes(hashlib.sha256(key).digest(), "big")
        arrival = row[2]
        if arrival < self._last_arrival:
            self.out_of_order += 1
        else:
            self._last_arrival = arrival
        self.summary.add(row)

    def _think_time(self, data: dict[str, Any], session_id: str, turn: int) -> float:
        """Seconds before a later turn (``turn`` > 0) is sent, after its previous turn's answer."""
        self.later_turns += 1
        if "think_time_s" in data:
            return float(data["think_time_s"])
        if self.options.think_time is not None:
            return self.options.think_time.sample(seed=self.options.seed, session_id=session_id, turn=turn)
        return 0.0

    def _finish(self) -> None:
        notes = self.ctx.notes
        self.sessions.finish(self.errors)
        if self.later_turns:
            think = self.options.think_time
            self.warnings.append(
                f"{self.sessions.multi_turn} sessions have later turns ({self.later_turns} requests): each is sent "
                "after its previous turn's answer plus its think time, with that answer in its messages"
                + (
                    f"; think times without one in the file come from {think} (seed {self.options.seed})."
                    if think
                    else "."
                )
            )
        if self.summary.count == 0 and not self.errors:
            self.errors.add(None, None, "the file has no requests")
        if self.summary.arrival_min < 0:
            self.shift_s = -self.summary.arrival_min
        if notes["skipped_failed"]:
            self.warnings.append(
                f"Skipped {notes['skipped_failed']} requests with no output tokens (failed requests in the source)."
            )
        if notes["sessions_cut"]:
            self.warnings.append(
                f"{notes['sessions_cut']} conversations had a human turn without text: each session ends before it."
            )
        if notes["default_max_tokens"]:
            self.warnings.append(
                f"{notes['default_max_tokens']} requests had no max_tokens: set to {self.options.default_max_tokens}."
            )
        if self.out_of_order:
            self.warnings.append(
                f"Arrivals were not sorted ({self.out_of_order} requests earlier than one before them): the requests "
                "were sorted by arrival; each keeps its file order in metadata.source_index."
            )
        if self.options.pool is not None and self.kind == TIMING:
            pool = self.options.pool
            self.warnings.append(
                f"Content is paired: prompts come from the pool {pool.label}, matched by task and nearest length; "
                "they are not this trace's real prompts."
            )

    @property
    def content_sha256(self) -> str:
        return f"{self.content_hash:064x}"

    def summary_dict(self) -> dict[str, Any]:
        data = self.summary.as_dict()
        data["token_counter"] = self.options.token_counter_name
        data["out_of_order"] = self.out_of_order
        data["skipped_failed"] = self.ctx.notes["skipped_failed"]
        data["sessions"] = self.sessions.count
        data["multi_turn_sessions"] = self.sessions.multi_turn
        data["turns_max"] = self.sessions.turns_max
        return data


def _surrogate_field(row: tuple, texts: tuple[str | None, ...]) -> str | None:
    """The first field of a built row (``ROW_FIELDS`` positions, JSON columns as text) that holds
    a lone surrogate, by its trace-format name."""
    candidates = (
        ("id", row[1]),
        ("prompt", row[3]),
        ("messages", texts[0]),
        ("response_format", texts[1]),
        ("tools", texts[2]),
        ("metadata", texts[3]),
        ("task", row[9]),
        ("class", row[10]),
        ("session_id", row[17]),
    )
    return next(
        (name for name, value in candidates if isinstance(value, str) and _SURROGATE.search(value)), None
    )
