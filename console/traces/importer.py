"""The import pipeline without the database: parse, give arrivals and content, validate, normalise.

``TraceBuilder.rows()`` streams, per accepted request, a tuple in ``ROW_FIELDS`` order and the JSON
text of its JSON columns (``JSON_FIELDS`` order) while it
collects errors, warnings and a summary; services.py writes the rows in one transaction. State kept
per request is one id string (duplicate check); the file's content is never held in memory.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from console.jsonutil import canonical_json
from console.traces.arrivals import ArrivalSpec, arrival_spec_parse, arrivals_generate
from console.traces.errors import ErrorLog
from console.traces.pairing import PromptPool
from console.traces.parsers import PARSERS, PROMPTS, REQUESTS, TIMING, ParseContext, Record
from console.traces.sessions import SessionChecker, ThinkTimeSpec
from console.traces.splits import split_assigner, split_trace_key
from console.traces.tokens import ESTIMATE_NAME, TokenCounter, prompt_tokens
from console.traces.validation import request_schema_errors, request_semantic_errors

ROW_FIELDS = (
    "position",
    "request_id",
    "arrival_s",
    "prompt",
    "messages",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "task",
    "traffic_class",
    "response_format",
    "tools",
    "metadata",
    "prompt_tokens",
    "split",
    "source_index",
    "session_id",
    "turn",
    "think_time_s",
)
JSON_FIELDS = ("messages", "response_format", "tools", "metadata")
DEFAULT_PROMPT_ARRIVAL = "poisson:1"
_MOD = 1 << 256


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


@dataclass
class Summary:
    count: int = 0
    tasks: Counter = field(default_factory=Counter)
    classes: Counter = field(default_factory=Counter)
    splits: Counter = field(default_factory=Counter)
    with_tools: int = 0
    with_schema: int = 0
    chat: int = 0
    prompt_tokens_sum: int = 0
    prompt_tokens_max: int = 0
    max_tokens_sum: int = 0
    max_tokens_max: int = 0
    arrival_min: float = math.inf
    arrival_max: float = -math.inf

    def as_dict(self) -> dict[str, Any]:
        n = self.count or 1
        span = self.arrival_max - self.arrival_min if self.count else 0.0
        # arrivals a subnormal apart would give an infinite rate (not storable as JSON)
        rate = self.count / span if self.count > 1 and span > 0 else math.nan
        return {
            "requests": self.count,
            "by_task": dict(self.tasks.most_common()),
            "by_class": dict(self.classes.most_common()),
            "by_split": dict(self.splits.most_common()),
            "with_tools": self.with_tools,
            "with_json_schema": self.with_schema,
            "chat_requests": self.chat,
            "prompt_tokens_mean": round(self.prompt_tokens_sum / n, 1),
            "prompt_tokens_max": self.prompt_tokens_max,
            "max_tokens_mean": round(self.max_tokens_sum / n, 1),
            "max_tokens_max": self.max_tokens_max,
            "duration_s": round(span, 3),
            "mean_rate_rps": round(rate, 4) if math.isfinite(rate) else None,
        }


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

    # --- arrivals -----------------------------------------------------------------------------
    def _arrival_source(self) -> Iterator[float] | None:
        """Arrivals that replace the file's own, or None to keep them."""
        spec = self.options.arrival
        if self.kind == PROMPTS and (spec is None or spec.kind == "trace"):
            if spec is not None:
                self.errors.add(None, "arrival", "this prompt set has no timing: give an arrival process")
            spec = arrival_spec_parse(DEFAULT_PROMPT_ARRIVAL)
            self.warnings.append(
                f"The file has no timing: arrivals come from {spec} (seed {self.options.seed}), "
                "the default; choose the process explicitly for a real evaluation."
            )
        if spec is None or spec.kind == "trace":
            return None
        if self.kind != PROMPTS:
            self.warnings.append(f"The file's own arrival times were replaced by {spec}.")
        self.arrival_label = str(spec)
        if spec.kind == "borrow":
            return iter(self.options.borrowed_arrivals or [])
        return arrivals_generate(spec, seed=self.options.seed)

    def _pair(self, record: Record) -> None:
        """Give a timing-only record the content of its matched pool prompt."""
        opts = self.options
        data = record.data
        assert opts.pool is not None
        chosen = opts.pool.match(
            request_id=str(data.get("id")),
            task=data.get("task"),
            input_tokens=record.input_tokens or 0,
            seed=opts.seed,
        )
        for key in ("prompt", "messages", "tools", "response_format"):
            value = getattr(chosen, key)
            if value is not None:
                data[key] = value
        data["task"] = data.get("task") or chosen.task
        data["max_tokens"] = record.output_tokens
        data.setdefault("metadata", {})["paired"] = {
            "pool_prompt": chosen.key,
            "trace_input_tokens": record.input_tokens,
            "trace_output_tokens": record.output_tokens,
            "prompt_tokens": chosen.tokens,
        }

    # --- the pipeline ---------------------------------------------------------------------------
    def rows(self) -> Iterator[tuple]:
        opts = self.options
        if self.kind == TIMING and opts.pool is None:
            self.errors.add(
                None,
                None,
                f"{PARSERS[opts.source_format].label} has timing but no prompts: give a prompt pool to pair "
                "with (--pair-with), so content-less requests never pass as real ones",
            )
            return
        arrivals = self._arrival_source()
        if self.errors:
            return
        split_of = split_assigner(trace_key=split_trace_key(seed=opts.seed), holdout_fraction=opts.holdout_fraction)
        counter = opts.token_counter
        ceiling = opts.max_tokens_ceiling
        timing = self.kind == TIMING
        needs_timestamp = self.kind == REQUESTS and opts.source_format != "native"
        origin: float | None = None
        last_arrival = -math.inf
        index = 0
        borrowed_short = False
        ids = self._ids
        errors = self.errors
        add_error = errors.add
        sessions = self.sessions
        session_lines = sessions.lines
        error_list = errors.errors
        canonical = canonical_json
        sha256 = hashlib.sha256
        from_bytes = int.from_bytes
        content_hash = self.content_hash
        out_of_order = self.out_of_order
        # the summary, kept in locals while rows stream and stored on self.summary when they stop
        tasks: dict[str, int] = {}
        classes: dict[str, int] = {}
        splits: dict[str, int] = {}
        count = with_tools = with_schema = chat = 0
        tokens_sum = tokens_max = max_tokens_sum = max_tokens_max = 0
        arrival_min, arrival_max = math.inf, -math.inf
        try:
            for record in self.parser.parse(self.file, self.ctx):
                data = record.data
                line = record.line
                if record.output_tokens == 0:
                    self.ctx.notes["skipped_failed"] += 1
                    continue
                # timing
                clock_arrival: float | None = None
                later_turn = bool(data.get("turn"))  # sent after its previous turn, not at an arrival
                if later_turn and (arrivals is not None or record.clock_s is not None):
                    data.pop("arrival_s", None)  # nominal: the session's start, set below
                elif arrivals is not None:
                    value = next(arrivals, None)
                    if value is None:
                        if not borrowed_short:
                            add_error(line, "arrival", f"the borrowed arrivals ran out after {index} requests")
                            borrowed_short = True
                        continue
                    data["arrival_s"] = value
                elif record.clock_s is not None:
                    if origin is None:
                        origin = record.clock_s
                    clock_arrival = record.clock_s - origin
                    data["arrival_s"] = 0.0  # validated below; set after (it may be negative before the shift)
                elif needs_timestamp and "arrival_s" not in data:
                    add_error(line, "timestamp", "is missing: give the request a timestamp, or an arrival process")
                    continue
                # content
                if timing:
                    self._pair(record)
                # validation: the schema, then what a schema cannot say
                problems = request_schema_errors(data)
                if not problems:
                    problems = request_semantic_errors(data, max_tokens_ceiling=ceiling)
                request_id = str(data.get("id"))
                if request_id in ids:
                    problems.append(("id", f"duplicate id {request_id!r} (ids must be unique within a trace)"))
                session_id = str(data.get("session_id", request_id))
                turn = int(data.get("turn") or 0)
                if not problems:
                    held = session_lines.get(session_id)  # None: the session's first request (most are)
                    seen = None if held is None else sessions.duplicate(session_id=session_id, turn=turn)
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
                if problems:
                    for path, message in problems:
                        add_error(line, path or None, message)
                    continue
                ids.add(request_id)
                if held is None and turn == 0 and "session_id" not in data:
                    session_lines[session_id] = line  # what sessions.add does for a request of its own
                else:
                    sessions.add(
                        session_id=session_id,
                        turn=turn,
                        line=line,
                        arrival_s=None if turn else (clock_arrival if clock_arrival is not None else data["arrival_s"]),
                        explicit="session_id" in data,
                    )
                if error_list or errors.more:
                    continue  # keep validating to report every bad line, but build nothing more
                if clock_arrival is not None:
                    if not math.isfinite(clock_arrival):
                        add_error(line, "timestamp", "is too far from the first request's (not a finite offset)")
                        continue
                    data["arrival_s"] = clock_arrival
                arrival = float(data["arrival_s"])
                prompt = data.get("prompt")
                messages = data.get("messages")
                metadata = data.get("metadata") or {}
                tokens = prompt_tokens(prompt=prompt, messages=messages, token_counter=counter)
                if timing:
                    metadata["paired"]["prompt_tokens"] = tokens
                task = data.get("task") or "unknown"
                traffic = data.get("class") or "interactive"
                # keyed by the session: all turns of a conversation fall in the same split
                split = split_of(session_id)
                think_time = 0.0
                if turn:
                    self.later_turns += 1
                    if "think_time_s" in data:
                        think_time = float(data["think_time_s"])
                    elif opts.think_time is not None:
                        think_time = opts.think_time.sample(seed=opts.seed, session_id=session_id, turn=turn)
                max_tokens = int(data["max_tokens"])
                response_format = data.get("response_format")
                tools = data.get("tools")
                temperature, top_p, seed = data.get("temperature"), data.get("top_p"), data.get("seed")
                if type(seed) is float:
                    seed = int(seed)  # an integral float (5.0) passes the schema; the column is an integer
                # JSON columns serialised once, canonically: for COPY and for the content hash. A number
                # that is not finite (Parquet holds NaN; 1e999 is inf) raises ValueError: reported on
                # its line, where a jsonb column would refuse it at commit
                field = "messages"
                try:
                    messages_text = None if messages is None else canonical(messages)
                    field = "response_format"
                    format_text = None if response_format is None else canonical(response_format)
                    field = "tools"
                    tools_text = None if tools is None else canonical(tools)
                    field = "metadata"
                    metadata_text = canonical(metadata)
                except ValueError:
                    add_error(line, field, "holds a number that is not finite (such as 1e999, beyond a double): numbers must be finite")
                    continue
                # the hashed key: fields joined by \x1f, None as "" for text and repr() for numbers
                key = (
                    f"{request_id}\x1f{arrival!r}\x1f{prompt or ''}\x1f{messages_text or ''}\x1f{format_text or ''}"
                    f"\x1f{tools_text or ''}\x1f{metadata_text}\x1f{max_tokens}\x1f{temperature!r}\x1f{top_p!r}"
                    f"\x1f{seed!r}\x1f{task}\x1f{traffic}\x1f{tokens}"
                )
                # single-turn requests hash as before sessions existed: stored traces keep their hash
                if turn or session_id != request_id:
                    key = f"{key}\x1f{session_id}\x1f{turn}\x1f{think_time!r}"
                if "\x00" in key or "\\u0000" in key:
                    add_error(line, None, "contains a NUL character (\\u0000), which cannot be stored")
                    continue
                content_hash += from_bytes(sha256(key.encode()).digest(), "big")  # reduced mod 2**256 at the end
                if arrival < last_arrival:
                    out_of_order += 1
                else:
                    last_arrival = arrival
                count += 1
                tasks[task] = tasks.get(task, 0) + 1
                classes[traffic] = classes.get(traffic, 0) + 1
                splits[split] = splits.get(split, 0) + 1
                if tools:
                    with_tools += 1
                if response_format and response_format.get("type") == "json_schema":
                    with_schema += 1
                if messages is not None:
                    chat += 1
                tokens_sum += tokens
                if tokens > tokens_max:
                    tokens_max = tokens
                max_tokens_sum += max_tokens
                if max_tokens > max_tokens_max:
                    max_tokens_max = max_tokens
                if arrival < arrival_min:
                    arrival_min = arrival
                if arrival > arrival_max:
                    arrival_max = arrival
                row = (
                    index,
                    request_id,
                    arrival,
                    prompt,
                    messages,
                    max_tokens,
                    temperature,
                    top_p,
                    seed,
                    task,
                    traffic,
                    response_format,
                    tools,
                    metadata,
                    tokens,
                    split,
                    index,
                    session_id,
                    turn,
                    think_time,
                )
                index += 1
                yield row, (messages_text, format_text, tools_text, metadata_text)
        finally:
            self.content_hash = content_hash % _MOD
            self.out_of_order = out_of_order
            summary = self.summary
            summary.count += count
            summary.tasks.update(tasks)
            summary.classes.update(classes)
            summary.splits.update(splits)
            summary.with_tools += with_tools
            summary.with_schema += with_schema
            summary.chat += chat
            summary.prompt_tokens_sum += tokens_sum
            summary.prompt_tokens_max = max(summary.prompt_tokens_max, tokens_max)
            summary.max_tokens_sum += max_tokens_sum
            summary.max_tokens_max = max(summary.max_tokens_max, max_tokens_max)
            summary.arrival_min = min(summary.arrival_min, arrival_min)
            summary.arrival_max = max(summary.arrival_max, arrival_max)
        self._finish()

    def _finish(self) -> None:
        notes = self.ctx.notes
        self.sessions.finish(self.errors)
        if self.later_turns:
            think = self.options.think_time
            self.warnings.append(
                f"{self.sessions.multi_turn} sessions have later turns ({self.later_turns} requests): each is sent "
                "after its previous turn's answer plus its think time, with that answer in its messages"
                + (f"; think times without one in the file come from {think} (seed {self.options.seed})." if think else ".")
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
