"""What every format parser yields, and the context it reports into."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar

from console.traces.errors import ErrorLog
from console.traces.parsers.stream import Limits

# What a file carries: requests with content and timing, prompts without timing, or timing without content.
REQUESTS = "requests"
PROMPTS = "prompts"
TIMING = "timing"


@dataclass(slots=True)
class Record:
    """One request as read from a file, in native field names (see docs/trace-format.md).

    ``data`` may lack ``arrival_s`` (prompt sets) or content (timing traces); the importer fills
    those in. ``input_tokens``/``output_tokens`` are the lengths a timing trace records.
    ``clock_s``: an absolute timestamp (s) the importer rebases so the trace starts at 0.
    """

    line: int
    data: dict[str, Any]
    input_tokens: int | None = None
    output_tokens: int | None = None
    clock_s: float | None = None


@dataclass
class ParseContext:
    file: str
    errors: ErrorLog
    default_max_tokens: int = 256
    default_task: str | None = None
    turns: str = "first"  # multi-turn prompt sets: the "first" turn only, or "all" turns as a session
    warnings: list[str] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)
    limits: Limits = field(default_factory=Limits.from_settings)
    mapping: Any = None  # a parsers.mapped.FieldMapping for the field-mapped format


class Parser:
    name: ClassVar[str]
    label: ClassVar[str]
    kind: ClassVar[str]

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        """Whether the first decoded item (a dict, str, or a CSV header list) looks like this format."""
        return False

    def parse(self, file: IO[bytes], ctx: ParseContext) -> Iterator[Record]:
        raise NotImplementedError


def positive_int(value: Any) -> int | None:
    """An int >= 0 from an int, an integral float or a decimal string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer():
        return int(value) if value >= 0 else None
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
    return None


def finite_float(value: Any) -> float | None:
    import math

    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
