"""What an import counts while its rows stream: requests by task, class and split, how many carry
tools, a JSON schema or chat messages, prompt and output lengths (tokens), the arrival span (s)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


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

    def add(
        self,
        *,
        task: str,
        traffic_class: str,
        split: str,
        tools: bool,
        json_schema: bool,
        chat: bool,
        prompt_tokens: int,
        max_tokens: int,
        arrival_s: float,
    ) -> None:
        """Count one stored request (``prompt_tokens``, ``max_tokens`` in tokens, ``arrival_s`` in s)."""
        self.count += 1
        self.tasks[task] += 1
        self.classes[traffic_class] += 1
        self.splits[split] += 1
        self.with_tools += tools
        self.with_schema += json_schema
        self.chat += chat
        self.prompt_tokens_sum += prompt_tokens
        if prompt_tokens > self.prompt_tokens_max:
            self.prompt_tokens_max = prompt_tokens
        self.max_tokens_sum += max_tokens
        if max_tokens > self.max_tokens_max:
            self.max_tokens_max = max_tokens
        if arrival_s < self.arrival_min:
            self.arrival_min = arrival_s
        if arrival_s > self.arrival_max:
            self.arrival_max = arrival_s

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
