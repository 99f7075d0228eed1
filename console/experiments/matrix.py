"""Pure helpers: config hashes, sweep expansion, load-level parsing, the interleaved run order."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the same content always gives the same bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


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

    def as_dict(self) -> dict:
        return {"label": self.label, "rate_multiplier": self.rate_multiplier, "concurrency": self.concurrency}


_LOAD_RE = re.compile(r"^\s*(?:(?P<mult>\d+(?:\.\d+)?)x)?\s*(?:/?\s*c(?P<cap>\d+))?\s*$")


def load_levels_parse(spec: str | list) -> list[LoadLevel]:
    """Parse ``"0.5x,1x,2x/c4,c8"``: rate multipliers of the trace's own arrival rate, each
    optionally with a client-side concurrency cap (``c8`` alone means 1x with a cap of 8)."""
    items: list = spec if isinstance(spec, list) else [s for s in str(spec).split(",") if s.strip()]
    if not items:
        raise ValueError("give at least one load level, e.g. 1x or 1x,2x")
    levels: list[LoadLevel] = []
    for item in items:
        if isinstance(item, dict):
            mult = float(item.get("rate_multiplier", 1.0))
            cap = item.get("concurrency")
            label = item.get("label") or (f"{mult:g}x" + (f"/c{cap}" if cap else ""))
            level = LoadLevel(str(label), mult, int(cap) if cap else None)
        else:
            match = _LOAD_RE.match(str(item))
            if not match or (match["mult"] is None and match["cap"] is None):
                raise ValueError(f"load level {str(item).strip()!r} is not like 2x, 0.5x, 2x/c4 or c8")
            mult = float(match["mult"]) if match["mult"] else 1.0
            cap = int(match["cap"]) if match["cap"] else None
            level = LoadLevel(str(item).strip(), mult, cap)
        if not (level.rate_multiplier > 0):
            raise ValueError(f"load level {level.label!r}: the rate multiplier must be > 0")
        if level.concurrency is not None and level.concurrency < 1:
            raise ValueError(f"load level {level.label!r}: the concurrency cap must be >= 1")
        levels.append(level)
    labels = [lv.label for lv in levels]
    if len(set(labels)) != len(labels):
        raise ValueError(f"load levels repeat: {labels}")
    return levels


def run_order(*, arms: int, loads: int, repeats: int) -> list[tuple[int, int, int]]:
    """The execution order as (arm, load, repeat) indices, interleaved and balanced.

    Each (repeat, load) block runs every arm once; blocks alternate forward and reversed arm
    order (A B C, C B A, ...), so slow drift of the machine and warm caches hit every arm alike.
    """
    order: list[tuple[int, int, int]] = []
    block = 0
    for repeat in range(repeats):
        for load in range(loads):
            arm_indices = range(arms) if block % 2 == 0 else reversed(range(arms))
            order.extend((arm, load, repeat) for arm in arm_indices)
            block += 1
    return order
