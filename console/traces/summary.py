"""What an import counts while its rows stream: requests by task, class and split, how many carry
tools, a JSON schema or chat messages, prompt and output lengths (tokens), the arrival span (s)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Summary:
    count: int = 0
    tasks: dict[str, int] = field(default_factory=dict)  # requests per task, in order of first sight
    classes: dict[str, int] = field(default_factory=dict)
    splits: dict[str, int] = field(default_factory=dict)
    with_tools: int = 0
    with_schema: int = 0
    chat: int = 0
    prompt_tokens_sum: int = 0
    prompt_tokens_max: int = 0
    max_tokens_sum: int = 0
    max_tokens_max: int = 0
    arrival_min: float = math.inf
    arrival_max: float = -math.inf

    def add(self, row: tuple) -> None:
        """Count one stored request, its row in ``ROW_FIELDS`` order (tokens, seconds)."""
        arrival, _, messages, max_tokens = row[2:6]
        task, traffic, response_format, tools, _, tokens, split = row[9:16]
        self.count += 1
        # plain dicts, not Counters: a subclass's item access is slower, and this runs per request
        self.tasks[task] = self.tasks.get(task, 0) + 1
        self.classes[traffic] = self.classes.get(traffic, 0) + 1
        self.splits[split] = self.splits.get(split, 0) + 1
        if tools:
            self.with_tools += 1
        if response_format and response_format.get("type") == "json_schema":
            self.with_schema += 1
        if messages is not None:
            self.chat += 1
        self.prompt_tokens_sum += tokens
        if tokens > self.prompt_tokens_max:
            self.prompt_tokens_max = tokens
        self.max_tokens_sum += max_tokens
        if max_tokens > self.max_tokens_max:
            self.max_tokens_max = max_tokens
        if arrival < self.arrival_min:
            self.arrival_min = arrival
        if arrival > self.arrival_max:
            self.arrival_max = arrival

    def as_dict(self) -> dict[str, Any]:
        n = self.count or 1
        span = self.arrival_max - self.arrival_min if self.count else 0.0
        # arrivals a subnormal apart would give an infinite rate (not storable as JSON)
        rate = self.count / span if self.count > 1 and span > 0 else math.nan
        return {
            "requests": self.count,
            "by_task": _most_common(self.tasks),
            "by_class": _most_common(self.classes),
            "by_split": _most_common(self.splits),
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


def _most_common(counts: dict[str, int]) -> dict[str, int]:
    """Most frequent first, ties in order of first sight (what ``Counter.most_common`` gives)."""
    return dict(sorted(counts.items(), key=lambda item: item[1], reverse=True))
