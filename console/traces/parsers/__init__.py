"""Input formats: one parser class per format, and auto-detection from the first item of a file."""

from __future__ import annotations

import csv
import json
from typing import IO, Any

from console.traces.errors import ErrorLog
from console.traces.parsers.base import PROMPTS, REQUESTS, TIMING, ParseContext, Parser, Record
from console.traces.parsers.mapped import PARQUET_MAGIC, MappedParser
from console.traces.parsers.prompts import (
    BFCLParser,
    GSM8KParser,
    HumanEvalParser,
    JSONSchemaSetParser,
    MTBenchParser,
    PromptListParser,
    ShareGPTParser,
)
from console.traces.parsers.requests import NativeParser, OpenAILogParser
from console.traces.parsers.stream import json_array
from console.traces.parsers.timing import AzureParser, BurstGPTParser, MooncakeParser

__all__ = ["PARSERS", "PROMPTS", "REQUESTS", "TIMING", "ParseContext", "Parser", "Record", "detect_format"]

# Order matters: the first parser whose sniff accepts the first item wins.
PARSERS: dict[str, type[Parser]] = {
    p.name: p
    for p in (
        NativeParser,
        OpenAILogParser,
        MooncakeParser,
        AzureParser,
        BurstGPTParser,
        MTBenchParser,
        ShareGPTParser,
        HumanEvalParser,
        BFCLParser,
        GSM8KParser,
        JSONSchemaSetParser,
        PromptListParser,
        MappedParser,
    )
}

# the field-mapped format is chosen by giving a prompt field, not from the format list
FORMAT_CHOICES = [(name, cls.label) for name, cls in PARSERS.items() if name != MappedParser.name]
SNIFF_LINES = 20


def _first_item(file: IO[bytes]) -> tuple[Any, str]:
    """The first decoded item of the file and how it was read ('json', 'array' or 'csv')."""
    file.seek(0)
    head = file.read(64 * 1024)
    file.seek(0)
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        return None, "empty"
    if head.startswith(PARQUET_MAGIC):
        return None, "parquet"
    if text.startswith(b"["):
        scratch = ErrorLog()
        for _, item in json_array(file, scratch):
            return item, "array"
        return None, "array"
    # JSON Lines: a bad first line should not hide the format, so try the next few lines too.
    for raw in head.splitlines()[:SNIFF_LINES]:
        stripped = raw.strip().lstrip(b"\xef\xbb\xbf")
        if not stripped.startswith(b"{"):
            continue
        try:
            item = json.loads(stripped.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError):
            continue
        if isinstance(item, dict):
            return item, "json"
    if text.startswith(b"{"):
        return None, "json"
    first_line = text.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()
    try:
        header = next(csv.reader([first_line]))
    except csv.Error:
        return None, "csv"
    return [c.strip() for c in header], "csv"


def detect_format(file: IO[bytes], *, filename: str) -> str | None:
    """The name of the format the file looks like, or None (the caller reports why)."""
    item, how = _first_item(file)
    if item is None or (isinstance(item, list) and how != "csv"):
        return None  # a list is a CSV header only when read from a CSV line (an array's [[...]] is not)
    for name, cls in PARSERS.items():
        if cls.sniff(item, filename=filename):
            return name
    return None


def describe_first_item(file: IO[bytes]) -> str:
    item, how = _first_item(file)
    if how == "empty":
        return "the file is empty"
    if how == "parquet":
        return "a Parquet file is read by field mapping: give the prompt field (--prompt-field)"
    if item is None:
        return "the first lines are not valid JSON objects"
    if isinstance(item, dict):
        return f"first item has fields {sorted(item)[:12]}"
    if isinstance(item, list):
        return f"first line {item[:12]} is not a header this importer knows"
    return f"first item is a {type(item).__name__}"
