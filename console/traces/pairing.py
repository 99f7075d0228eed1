"""Pairing: giving a timing-only trace content from a prompt pool.

Each timing request takes a prompt from the pool:
1. among prompts of the request's task when the trace has one and the pool has prompts of it, else
   among all prompts;
2. the ``k`` prompts whose length (tokens) is nearest the request's recorded input length;
3. one of those, picked by a hash of (seed, request id): deterministic for a seed, and independent of
   file order and of the other requests.
Its ``max_tokens`` is the trace's recorded output length; arrival times are the trace's own.
Requests longer than every pool prompt get the longest prompts: the pairing notice says so.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field
from typing import Any

from console.traces.parsers.base import Record

DEFAULT_NEAREST = 8


@dataclass(frozen=True)
class PoolPrompt:
    key: str
    task: str
    tokens: int
    prompt: str | None = None
    messages: list | None = None
    tools: list | None = None
    response_format: dict | None = None


@dataclass
class PromptPool:
    label: str
    prompts: list[PoolPrompt]
    nearest: int = DEFAULT_NEAREST
    _by_task: dict[str, tuple[list[int], list[PoolPrompt]]] = field(default_factory=dict, repr=False)
    _all: tuple[list[int], list[PoolPrompt]] = field(default=([], []), repr=False)

    def __post_init__(self) -> None:
        if not self.prompts:
            raise ValueError(f"the prompt pool {self.label} has no prompts")
        ordered = sorted(self.prompts, key=lambda p: (p.tokens, p.key))
        self._all = ([p.tokens for p in ordered], ordered)
        groups: dict[str, list[PoolPrompt]] = {}
        for p in ordered:
            groups.setdefault(p.task, []).append(p)
        self._by_task = {t: ([p.tokens for p in ps], ps) for t, ps in groups.items()}

    @property
    def max_tokens(self) -> int:
        return self._all[0][-1]

    def tasks(self) -> list[str]:
        return sorted(self._by_task)

    def match(self, *, request_id: str, task: str | None, input_tokens: int, seed: int) -> PoolPrompt:
        """The pool prompt for one timing request (see the module docstring)."""
        lengths, prompts = self._by_task.get(task, self._all) if task else self._all
        n = len(prompts)
        k = min(self.nearest, n)
        # the k nearest by |tokens - input_tokens|: grow a window around the insertion point
        hi = bisect.bisect_left(lengths, input_tokens)
        lo = hi - 1
        chosen = 0
        while chosen < k:
            take_left = hi >= n or (lo >= 0 and input_tokens - lengths[lo] <= lengths[hi] - input_tokens)
            if take_left:
                lo -= 1
            else:
                hi += 1
            chosen += 1
        window = prompts[lo + 1 : hi]
        digest = hashlib.blake2b(f"pair:{seed}:{request_id}".encode(), digest_size=8).digest()
        return window[int.from_bytes(digest, "big") % len(window)]

    def describe(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "prompts": len(self.prompts),
            "tasks": self.tasks(),
            "nearest": self.nearest,
        }


def record_pair(record: Record, *, pool: PromptPool, seed: int) -> None:
    """Give a timing-only record, in place, the content of its matched pool prompt: its max_tokens
    is the trace's recorded output length (tokens), and its metadata says what it was paired with."""
    data = record.data
    chosen = pool.match(
        request_id=str(data.get("id")),
        task=data.get("task"),
        input_tokens=record.input_tokens or 0,
        seed=seed,
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
