"""Pure helpers: config hashes, sweep expansion, load-level parsing, the interleaved run order."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any

from console.jsonutil import canonical_json


def config_hash(*, engine: str, target_model: str, engine_args: dict, speculative_config: dict | None) -> str:
    payload = {
        "engine": engine,
        "target_model": target_model,
        "engine_args": engine_args,
        "speculative_config": speculative_config,
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def sweep_expand(speculative_config: dict) -> list[dict]:
    """One config per draft length when ``num_speculative_tokens`` is a list (a sweep)."""
    k = speculative_config.get("num_speculative_tokens")
    if isinstance(k, list):
        if not k:
            raise ValueError("num_speculative_tokens: a sweep needs at least one draft length")
        if len(set(map(str, k))) != len(k):
            raise ValueError(f"num_speculative_tokens: the sweep {k} repeats a value")
        return [{**speculative_config, "num_speculative_tokens": value} for value in k]
    return [speculative_config]


def arm_label(speculative_config: dict | None) -> str:
    if speculative_config is None:
        return "baseline"
    method = speculative_config.get("method", "?")
    k = speculative_config.get("num_speculative_tokens")
    label = str(method)
    if method == "draft_model" and speculative_config.get("model"):
        label += f"({speculative_config['model']})"
    if k is not None:
        label += f" k={k}"
    return label


@dataclass(frozen=True)
class LoadLevel:
    label: str
    rate_multiplier: float
    concurrency: int | None
    weight: float | None = None  # its share of the declared workload mix (criterion 1); None = undeclared

    def as_dict(self) -> dict:
        out: dict[str, Any] = {
            "label": self.label, "rate_multiplier": self.rate_multiplier, "concurrency": self.concurrency
        }
        if self.weight is not None:
            out["weight"] = self.weight
        return out


MAX_LOAD_WEIGHT = 1e6


def _weight_parse(value: Any, *, label: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"load level {label!r}: weight {value[:40]!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"load level {label!r}: weight must be a number, got {str(value)[:40]!r}")
    if not 0 <= value <= MAX_LOAD_WEIGHT:
        raise ValueError(f"load level {label!r}: weight must be between 0 and {MAX_LOAD_WEIGHT:g}, got {value!r}")
    return float(value)


_LOAD_RE = re.compile(r"^\s*(?:(?P<mult>\d+(?:\.\d+)?)x)?\s*(?:/?\s*c(?P<cap>\d+))?\s*$")


def load_levels_parse(spec: str | list) -> list[LoadLevel]:
    """Parse ``"0.5x,1x,2x/c4,c8"``: rate multipliers of the trace's own arrival rate, each
    optionally with a client-side concurrency cap (``c8`` alone means 1x with a cap of 8) and a
    workload weight after ``=`` (``"1x=3,4x=1"``; a list item's ``"weight"``): the share of the
    traffic each load stands for, read by gate criterion 1. Weights go on every level or none,
    each in 0..1e6, summing above zero."""
    items: list = spec if isinstance(spec, list) else [s for s in str(spec).split(",") if s.strip()]
    if not items:
        raise ValueError("give at least one load level, e.g. 1x or 1x,2x")
    levels: list[LoadLevel] = []
    for item in items:
        if isinstance(item, dict):
            mult = float(item.get("rate_multiplier", 1.0))
            cap = item.get("concurrency")
            label = item.get("label") or (f"{mult:g}x" + (f"/c{cap}" if cap else ""))
            weight = _weight_parse(item.get("weight"), label=str(label))
            level = LoadLevel(str(label), mult, int(cap) if cap else None, weight)
        else:
            text, eq, weight_text = str(item).partition("=")
            match = _LOAD_RE.match(text)
            if not match or (match["mult"] is None and match["cap"] is None):
                raise ValueError(
                    f"load level {str(item).strip()[:60]!r} is not like 2x, 0.5x, 2x/c4, c8 or 2x=0.3 (with a weight)"
                )
            mult = float(match["mult"]) if match["mult"] else 1.0
            cap = int(match["cap"]) if match["cap"] else None
            weight = _weight_parse(weight_text.strip(), label=text.strip()) if eq else None
            level = LoadLevel(text.strip(), mult, cap, weight)
        if not (level.rate_multiplier > 0):
            raise ValueError(f"load level {level.label!r}: the rate multiplier must be > 0")
        if level.concurrency is not None and level.concurrency < 1:
            raise ValueError(f"load level {level.label!r}: the concurrency cap must be >= 1")
        levels.append(level)
    labels = [lv.label for lv in levels]
    if len(set(labels)) != len(labels):
        raise ValueError(f"load levels repeat: {labels}")
    weighted = [lv.label for lv in levels if lv.weight is not None]
    if weighted and len(weighted) != len(levels):
        unset = [lv.label for lv in levels if lv.weight is None]
        raise ValueError(f"weights: declare a weight on every load level or on none ({', '.join(unset)} has none)")
    if weighted and not sum(lv.weight or 0.0 for lv in levels) > 0:
        raise ValueError("weights: the load levels' weights sum to zero")
    return levels


def run_order(*, arms: int, loads: int, repeats: int) -> list[tuple[int, int, int]]:
    """The execution order as (arm, load, repeat) indices, interleaved and balanced.

    Each (repeat, load) block runs every arm once; blocks alternate forward and reversed arm
    order (A B C, C B A, ...), so slow drift of the machine and warm caches hit every arm alike.
    """
    return [(a, lv, r) for a, lv, r, _ in matrix_order(arms=arms, loads=loads, repeats=repeats, buckets=1)]


def matrix_order(*, arms: int, loads: int, repeats: int, buckets: int) -> list[tuple[int, int, int, int]]:
    """:func:`run_order` with output-length buckets: (arm, load, repeat, bucket) indices; each
    (repeat, load, bucket) block runs every arm once, blocks alternating the arm order."""
    order: list[tuple[int, int, int, int]] = []
    block = 0
    for repeat in range(repeats):
        for load in range(loads):
            for bucket in range(buckets):
                arm_indices = range(arms) if block % 2 == 0 else reversed(range(arms))
                order.extend((arm, load, repeat, bucket) for arm in arm_indices)
                block += 1
    return order


MAX_OUTPUT_BUCKETS = 32
TOKENS_MAX = 2**31 - 1  # a PostgreSQL integer: edges and limits beyond it are no token count


@dataclass(frozen=True)
class OutputBucket:
    """Requests whose recorded output length (tokens) is in ``[lo, hi)`` (``hi`` None: no upper
    edge), replayed with ``max_tokens`` capped at ``output_limit``."""

    label: str
    lo: int
    hi: int | None
    output_limit: int

    def as_dict(self) -> dict:
        return {"label": self.label, "lo": self.lo, "hi": self.hi, "output_limit": self.output_limit}

    def contains(self, tokens: int) -> bool:
        return tokens >= self.lo and (self.hi is None or tokens < self.hi)


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        return int(value)
    return None


def output_buckets_parse(spec: str | list | None) -> list[OutputBucket]:
    """Parse output-length buckets: ``"0:64,64:256,256:1024"`` (each ``edge:limit``: bucket i holds
    recorded output lengths from its edge up to the next edge, the last has no upper edge; its
    requests get ``max_tokens`` capped at the limit), or a list of ``{"lo": edge, "output_limit":
    limit}`` objects (how they are stored). Empty or None: no buckets (every request, one run per
    arm and load). Raises ValueError naming the bucket (1-based) and what is wrong with it."""
    if spec is None:
        return []
    items: list = spec if isinstance(spec, list) else [s for s in str(spec).split(",") if s.strip()]
    if len(items) > MAX_OUTPUT_BUCKETS:
        raise ValueError(f"at most {MAX_OUTPUT_BUCKETS} output buckets, got {len(items)}")
    edges: list[int] = []
    limits: list[int] = []
    for i, item in enumerate(items, start=1):
        if isinstance(item, dict):
            edge, limit = item.get("lo"), item.get("output_limit")
        else:
            edge, sep, limit = str(item).strip().partition(":")
            if not sep:
                raise ValueError(
                    f"output bucket {i} ({str(item).strip()!r}) is not like 64:256 (edge:output limit)"
                )
        lo, cap = _whole(edge), _whole(limit)
        if lo is None or not 0 <= lo <= TOKENS_MAX:
            raise ValueError(
                f"output bucket {i}: the edge must be a whole number of tokens from 0 to {TOKENS_MAX}, got {edge!r}"
            )
        if cap is None or not 1 <= cap <= TOKENS_MAX:
            raise ValueError(
                f"output bucket {i}: the output limit must be a whole number of tokens from 1 to {TOKENS_MAX}, "
                f"got {limit!r}"
            )
        if edges and lo <= edges[-1]:
            raise ValueError(
                f"output bucket {i}: edge {lo} is not above bucket {i - 1}'s edge {edges[-1]} (edges must increase)"
            )
        edges.append(lo)
        limits.append(cap)
    out = []
    for i, (lo, cap) in enumerate(zip(edges, limits, strict=True)):
        hi = edges[i + 1] if i + 1 < len(edges) else None
        out.append(OutputBucket(f"{lo}-{hi}" if hi is not None else f"{lo}+", lo, hi, cap))
    return out


def recorded_output_tokens(*, max_tokens: int, metadata: Any) -> int:
    """A trace request's recorded output length (tokens): what a timing trace recorded
    (``metadata.paired.trace_output_tokens``), else its ``max_tokens`` (native traces and prompt
    sets record no output length: their limit is the best known bound)."""
    paired = metadata.get("paired") if isinstance(metadata, dict) else None
    value = paired.get("trace_output_tokens") if isinstance(paired, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return int(max_tokens)


def bucket_of(tokens: int, buckets: list[OutputBucket]) -> OutputBucket | None:
    return next((b for b in buckets if b.contains(tokens)), None)
