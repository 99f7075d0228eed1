"""Formats that carry whole requests: native JSONL, and OpenAI chat-completions request logs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import IO, Any

from console.traces.parsers.base import REQUESTS, ParseContext, Parser, Record, finite_float
from console.traces.parsers.stream import json_lines

TIMESTAMP_KEYS = ("timestamp", "created", "created_at", "time", "ts")


class NativeParser(Parser):
    name = "native"
    label = "specreview native JSONL"
    kind = REQUESTS

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        if not isinstance(first, dict):
            return False
        if "arrival_s" in first:
            return True
        if any(k in first for k in (*TIMESTAMP_KEYS, "model", "body", "custom_id")):
            return False  # an OpenAI request log
        return "id" in first and ("prompt" in first or "messages" in first) and "max_tokens" in first

    def parse(self, file: IO[bytes], ctx: ParseContext) -> Iterator[Record]:
        for line, obj in json_lines(file, ctx.errors, ctx.limits):
            if not isinstance(obj, dict):
                ctx.errors.add(line, None, f"each line must be a JSON object, got {type(obj).__name__}")
                continue
            yield Record(line, obj)


def parse_timestamp(value: Any) -> float | None:
    """Seconds since the epoch from a number (s, or ms/µs when that large) or an ISO 8601 string."""
    if isinstance(value, str):
        number = finite_float(value)
        if number is None:
            try:
                moment = datetime.fromisoformat(value.strip())
            except ValueError:
                return None
            if moment.tzinfo is None:
                from datetime import UTC

                moment = moment.replace(tzinfo=UTC)
            return moment.timestamp()
        value = number
    number = finite_float(value)
    if number is None:
        return None
    if number > 1e14:  # microseconds
        return number / 1e6
    if number > 1e11:  # milliseconds
        return number / 1e3
    return number


_BODY_KEYS = {"messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed"}
_BODY_KEYS |= {"response_format", "tools", "functions", "metadata"}


class OpenAILogParser(Parser):
    name = "openai_log"
    label = "OpenAI request log (chat-completions bodies with a timestamp)"
    kind = REQUESTS

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        if not isinstance(first, dict):
            return False
        if isinstance(first.get("body"), dict) or isinstance(first.get("request"), dict):
            return True
        has_content = "messages" in first or "prompt" in first
        return has_content and (any(k in first for k in TIMESTAMP_KEYS) or "model" in first)

    def parse(self, file: IO[bytes], ctx: ParseContext) -> Iterator[Record]:
        for line, obj in json_lines(file, ctx.errors, ctx.limits):
            if not isinstance(obj, dict):
                ctx.errors.add(line, None, f"each line must be a JSON object, got {type(obj).__name__}")
                continue
            body = obj.get("body") if isinstance(obj.get("body"), dict) else obj.get("request")
            if not isinstance(body, dict):
                body = obj
            clock = None
            for key in TIMESTAMP_KEYS:
                if key in obj or key in body:
                    raw = obj.get(key, body.get(key))
                    clock = parse_timestamp(raw)
                    if clock is None:
                        ctx.errors.add(line, key, f"is not a timestamp (epoch seconds or ISO 8601): {raw!r}")
                    break
            data: dict[str, Any] = {}
            request_id = obj.get("custom_id", obj.get("id", obj.get("request_id")))
            data["id"] = request_id if request_id is not None else f"line-{line}"
            for key in ("messages", "prompt", "temperature", "top_p", "seed", "response_format", "tools"):
                if key in body:
                    data[key] = body[key]
            max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
            if max_tokens is None:
                data["max_tokens"] = ctx.default_max_tokens
                ctx.notes["default_max_tokens"] += 1
            else:
                data["max_tokens"] = max_tokens
            if "tools" not in data and isinstance(body.get("functions"), list):
                data["tools"] = [{"type": "function", "function": f} for f in body["functions"]]
            raw_meta = body.get("metadata")
            meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
            task = obj.get("task", meta.get("task"))
            if task is not None:
                data["task"] = task
            traffic = obj.get("class", meta.get("class", meta.get("traffic_class")))
            if traffic is None and (obj.get("url") or body.get("service_tier") == "flex"):
                traffic = "batch"  # Batch API lines and flex-tier requests are not interactive
            if traffic is not None:
                data["class"] = traffic
            extra = {k: v for k, v in body.items() if k not in _BODY_KEYS and k not in TIMESTAMP_KEYS}
            metadata = dict(meta)
            if extra:
                metadata["openai"] = extra
            if clock is not None:
                metadata["timestamp"] = obj.get("timestamp", body.get("timestamp", clock))
            data["metadata"] = metadata
            yield Record(line, data, clock_s=clock)
