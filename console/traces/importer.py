"""The import pipeline without the database: parse, give arrivals and content, validate, normalise.

``TraceBuilder.rows()`` streams, per accepted request, a tuple in ``ROW_FIELDS`` order and the JSON
text of its JSON columns (``JSON_FIELDS`` order) while it
collects errors, warnings and a summary; services.py writes the rows in one transaction. State kept
per request is one id string (duplicate check); the file's content is never held in memory.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from console.traces.arrivals import ArrivalSpec, arrival_spec_parse, arrivals_generate
from console.traces.errors import ErrorLog
from console.traces.pairing import PromptPool
from console.traces.parsers import PARSERS, PROMPTS, REQUESTS, TIMING, ParseContext
from console.traces.splits import split_for, split_trace_key
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
            "duration_s": round(self.arrival_max - self.arrival_min, 3) if self.count else 0.0,
            "mean_rate_rps": (
                round(self.count / (self.arrival_max - self.arrival_min), 4)
                if self.count > 1 and self.arrival_max > self.arrival_min
                else None
            ),
        }


_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))
_canonical = _ENCODER.encode


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
        )
        self.summary = Summary()
        self.warnings: list[str] = []
        self.out_of_order = 0
        self.shift_s = 0.0  # added to every arrival after the fact (clock traces with early stragglers)
        self.content_hash = 0
        self.arrival_label = "trace"
        self._ids: set[str] = set()

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
        trace_key = split_trace_key(seed=opts.seed)
        counter = opts.token_counter
        origin: float | None = None
        last_arrival = -math.inf
        index = 0
        borrowed_short = False
        summary = self.summary
        ids = self._ids
        errors = self.errors
        for record in self.parser.parse(self.file, self.ctx):
            data = record.data
            line = record.line
            if record.output_tokens is not None and record.output_tokens == 0:
                self.ctx.notes["skipped_failed"] += 1
                continue
            # timing
            clock_arrival: float | None = None
            if arrivals is not None:
                value = next(arrivals, None)
                if value is None:
                    if not borrowed_short:
                        errors.add(line, "arrival", f"the borrowed arrivals ran out after {index} requests")
                        borrowed_short = True
                    continue
                data["arrival_s"] = value
            elif record.clock_s is not None:
                if origin is None:
                    origin = record.clock_s
                clock_arrival = record.clock_s - origin
                data["arrival_s"] = 0.0  # validated below; set after (it may be negative before the shift)
            elif "arrival_s" not in data and self.kind == REQUESTS and opts.source_format != "native":
                errors.add(
                    line, "timestamp", "is missing: give the request a timestamp, or an arrival process"
                )
                continue
            # content
            if self.kind == TIMING:
                assert opts.pool is not None
                request_id = str(data.get("id"))
                chosen = opts.pool.match(
                    request_id=request_id,
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
            # validation: the schema, then what a schema cannot say
            problems = request_schema_errors(data)
            if not problems:
                problems = request_semantic_errors(data, max_tokens_ceiling=opts.max_tokens_ceiling)
            request_id = str(data.get("id"))
            if request_id in ids:
                problems.append(("id", f"duplicate id {request_id!r} (ids must be unique within a trace)"))
            if problems:
                for path, message in problems:
                    errors.add(line, path or None, message)
                continue
            ids.add(request_id)
            if errors:
                continue  # keep validating to report every bad line, but build nothing more
            if clock_arrival is not None:
                data["arrival_s"] = clock_arrival
            arrival = float(data["arrival_s"])
            prompt = data.get("prompt")
            messages = data.get("messages")
            metadata = data.get("metadata") or {}
            tokens = prompt_tokens(prompt=prompt, messages=messages, token_counter=counter)
            if self.kind == TIMING:
                metadata["paired"]["prompt_tokens"] = tokens
            task = data.get("task") or "unknown"
            traffic = data.get("class") or "interactive"
            split = split_for(
                trace_key=trace_key, request_id=request_id, holdout_fraction=opts.holdout_fraction
            )
            max_tokens = int(data["max_tokens"])
            response_format = data.get("response_format")
            tools = data.get("tools")
            temperature, top_p, seed = data.get("temperature"), data.get("top_p"), data.get("seed")
            # JSON columns serialised once, canonically: for COPY and for the content hash
            texts = (
                None if messages is None else _canonical(messages),
                None if response_format is None else _canonical(response_format),
                None if tools is None else _canonical(tools),
                _canonical(metadata),
            )
            key = "\x1f".join(
                (request_id, repr(arrival), prompt or "", *(t or "" for t in texts), str(max_tokens))
                + (repr(temperature), repr(top_p), repr(seed), task, traffic, str(tokens))
            )
            if "\x00" in key or "\\u0000" in key:
                errors.add(line, None, "contains a NUL character (\\u0000), which cannot be stored")
                continue
            digest = hashlib.sha256(key.encode()).digest()
            self.content_hash = (self.content_hash + int.from_bytes(digest, "big")) % _MOD
            if arrival < last_arrival:
                self.out_of_order += 1
            else:
                last_arrival = arrival
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
            )
            summary.count += 1
            summary.tasks[task] += 1
            summary.classes[traffic] += 1
            summary.splits[split] += 1
            summary.with_tools += bool(tools)
            summary.with_schema += bool(response_format and response_format.get("type") == "json_schema")
            summary.chat += messages is not None
            summary.prompt_tokens_sum += tokens
            summary.prompt_tokens_max = max(summary.prompt_tokens_max, tokens)
            summary.max_tokens_sum += max_tokens
            summary.max_tokens_max = max(summary.max_tokens_max, max_tokens)
            summary.arrival_min = min(summary.arrival_min, arrival)
            summary.arrival_max = max(summary.arrival_max, arrival)
            index += 1
            yield row, texts
        self._finish()

    def _finish(self) -> None:
        notes = self.ctx.notes
        if self.summary.count == 0 and not self.errors:
            self.errors.add(None, None, "the file has no requests")
        if self.summary.arrival_min < 0:
            self.shift_s = -self.summary.arrival_min
        if notes["skipped_failed"]:
            self.warnings.append(
                f"Skipped {notes['skipped_failed']} requests with no output tokens (failed requests in the source)."
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
        return data
