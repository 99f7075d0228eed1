"""Timing-only traces: arrivals and token lengths, no text (Mooncake, Azure LLM inference, BurstGPT).

They become usable by pairing (console/traces/pairing.py): each request borrows a prompt from a pool.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import PurePath
from typing import IO, Any

from console.traces.parsers.base import TIMING, ParseContext, Parser, Record, finite_float, positive_int
from console.traces.parsers.stream import csv_rows, json_lines


def _file_task(filename: str) -> str | None:
    # Azure publishes one trace per workload: AzureLLMInferenceTrace_code / _conv
    stem = PurePath(filename).stem.lower()
    if stem.endswith("_code") or "_code_" in stem:
        return "code"
    if stem.endswith("_conv") or "_conv_" in stem:
        return "chat"
    return None


class MooncakeParser(Parser):
    name = "mooncake"
    label = "Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids)"
    kind = TIMING

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        return isinstance(first, dict) and {"timestamp", "input_length", "output_length"} <= set(first)

    def parse(self, file: IO[bytes], ctx: ParseContext) -> Iterator[Record]:
        for line, obj in json_lines(file, ctx.errors, ctx.limits):
            if not isinstance(obj, dict):
                ctx.errors.add(line, None, f"each line must be a JSON object, got {type(obj).__name__}")
                continue
            ok = True
            ts = obj.get("timestamp")
            ts_s = finite_float(ts) if not isinstance(ts, str) else None
            if ts_s is None or ts_s < 0:
                ctx.errors.add(line, "timestamp", f"must be a finite number of milliseconds >= 0, got {ts!r}")
                ok = False
            lengths = {}
            for key in ("input_length", "output_length"):
                value = positive_int(obj.get(key)) if not isinstance(obj.get(key), str) else None
                if value is None:
                    ctx.errors.add(line, key, f"must be an integer >= 0 (tokens), got {obj.get(key)!r}")
                    ok = False
                lengths[key] = value
            hash_ids = obj.get("hash_ids", [])
            if not isinstance(hash_ids, list):
                ctx.errors.add(line, "hash_ids", "must be a list of integers")
                ok = False
            if not ok:
                continue
            assert ts_s is not None
            metadata = {k: v for k, v in obj.items() if k not in ("timestamp",)}
            data = {"id": f"mooncake-{line}", "arrival_s": ts_s / 1000.0, "metadata": metadata}
            yield Record(
                line, data, input_tokens=lengths["input_length"], output_tokens=lengths["output_length"]
            )


class AzureParser(Parser):
    name = "azure"
    label = "Azure LLM inference CSV (TIMESTAMP, ContextTokens, GeneratedTokens)"
    kind = TIMING

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        return isinstance(first, list) and {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= set(first)

    def parse(self, file: IO[bytes], ctx: ParseContext) -> Iterator[Record]:
        task = _file_task(ctx.file)
        for line, row in csv_rows(file, ctx.errors, ctx.limits):
            ok = True
            raw_ts = row.get("TIMESTAMP", "")
            try:
                # 7 fractional digits (100 ns ticks): keep microseconds for fromisoformat
                text = raw_ts.strip()
                if "." in text:
                    head, frac = text.rsplit(".", 1)
                    text = f"{head}.{frac[:6].ljust(6, '0')}"
                moment = datetime.fromisoformat(text)
                if moment.tzinfo is None:
                    moment = moment.replace(tzinfo=UTC)
                clock = moment.timestamp()
            except ValueError:
                ctx.errors.add(line, "TIMESTAMP", f"is not a date and time: {raw_ts!r}")
                ok = False
            tokens = {}
            for key in ("ContextTokens", "GeneratedTokens"):
                value = positive_int(row.get(key))
                if value is None:
                    ctx.errors.add(line, key, f"must be an integer >= 0 (tokens), got {row.get(key)!r}")
                    ok = False
                tokens[key] = value
            if not ok:
                continue
            data: dict[str, Any] = {"id": f"azure-{line}", "metadata": {"timestamp": raw_ts}}
            if task:
                data["task"] = task
            yield Record(
                line,
                data,
                input_tokens=tokens["ContextTokens"],
                output_tokens=tokens["GeneratedTokens"],
                clock_s=clock,
            )


class BurstGPTParser(Parser):
    name = "burstgpt"
    label = "BurstGPT CSV (Timestamp, Model, Request tokens, Response tokens, Log Type)"
    kind = TIMING

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        return isinstance(first, list) and {"Timestamp", "Request tokens", "Response tokens"} <= set(first)

    def parse(self, file: IO[bytes], ctx: ParseContext) -> Iterator[Record]:
        for line, row in csv_rows(file, ctx.errors, ctx.limits):
            ok = True
            ts = finite_float(row.get("Timestamp"))
            if ts is None or ts < 0:
                ctx.errors.add(
                    line,
                    "Timestamp",
                    f"must be a finite number of seconds >= 0, got {row.get('Timestamp')!r}",
                )
                ok = False
            tokens = {}
            for key in ("Request tokens", "Response tokens"):
                value = positive_int(row.get(key))
                if value is None:
                    ctx.errors.add(line, key, f"must be an integer >= 0, got {row.get(key)!r}")
                    ok = False
                tokens[key] = value
            if not ok:
                continue
            if tokens["Request tokens"] == 0 and tokens["Response tokens"] == 0:
                # BurstGPT logs failed requests with zero tokens: they never produced output to replay.
                ctx.notes["skipped_failed"] += 1
                continue
            metadata = {
                k: row[k] for k in ("Model", "Log Type", "Total tokens") if k in row and row[k] is not None
            }
            data = {"id": f"burstgpt-{line}", "arrival_s": ts, "metadata": metadata}
            yield Record(
                line, data, input_tokens=tokens["Request tokens"], output_tokens=tokens["Response tokens"]
            )
