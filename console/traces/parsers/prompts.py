"""Prompt sets without timing: MT-Bench/Spec-Bench, ShareGPT, HumanEval, BFCL, JSON-schema sets, GSM8K,
and a plain JSON array of prompt strings. Arrivals come from an arrival process (console/traces/arrivals.py).

Multi-turn sets (MT-Bench/Spec-Bench, ShareGPT) become, by default (``turns="first"``), one request
per conversation, from its first user turn, with the later turns kept in ``metadata.later_turns``.
With ``turns="all"`` every user turn is a request of one session (``session_id``, ``turn``): it holds
only its new user message, and the replay adds the arm's own earlier answers (replaying the recorded
answers verbatim would measure a conversation that never happened).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import IO, Any

from console.traces.parsers.base import PROMPTS, ParseContext, Parser, Record
from console.traces.parsers.stream import json_array, json_lines

# Spec-Bench and MT-Bench categories -> task labels
CATEGORY_TASKS = {
    "mt_bench": "chat",
    "translation": "translation",
    "summarization": "summarization",
    "qa": "qa",
    "math_reasoning": "math",
    "rag": "rag",
    "coding": "code",
    "math": "math",
    "reasoning": "chat",
    "extraction": "chat",
    "stem": "chat",
    "humanities": "chat",
    "writing": "chat",
    "roleplay": "chat",
}


def _items(file: IO[bytes], ctx: ParseContext) -> Iterator[tuple[int, Any]]:
    """Elements of a JSON array file, or the lines of a JSON Lines file."""
    file.seek(0)
    head = file.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    file.seek(0)
    if head.startswith(b"["):
        yield from json_array(file, ctx.errors, ctx.limits)
    else:
        yield from json_lines(file, ctx.errors, ctx.limits)


def _object(line: int, item: Any, ctx: ParseContext) -> dict | None:
    if not isinstance(item, dict):
        ctx.errors.add(line, None, f"each item must be a JSON object, got {type(item).__name__}")
        return None
    return item


def _text(line: int, item: dict, key: str, ctx: ParseContext) -> str | None:
    value = item.get(key)
    if not isinstance(value, str) or not value.strip():
        ctx.errors.add(
            line, key, "required text is missing or empty" if value is None else "must be non-empty text"
        )
        return None
    return value


class _PromptParser(Parser):
    kind = PROMPTS
    task: str = "unknown"

    def parse(self, file: IO[bytes], ctx: ParseContext) -> Iterator[Record]:
        for line, item in _items(file, ctx):
            obj = _object(line, item, ctx) if self.wants_object else item
            if obj is None:
                continue
            converted = self.convert(line, obj, ctx)
            if converted is None:
                continue
            for data in converted if isinstance(converted, list) else [converted]:
                data.setdefault("task", ctx.default_task or self.task)
                data.setdefault("max_tokens", ctx.default_max_tokens)
                yield Record(line, data)

    wants_object = True

    def convert(self, line: int, item: Any, ctx: ParseContext) -> dict | list[dict] | None:
        """One request, several (the turns of a session), or None after reporting why."""
        raise NotImplementedError


def session_turns(base: dict[str, Any], user_texts: list[str]) -> list[dict]:
    """One request per user turn, all of session ``base["id"]``: turn 0 keeps ``base`` (its id and
    messages), turn k is ``<id>-turn<k>`` with only its own user message."""
    session_id = base["id"]
    first = {**base, "session_id": session_id, "turn": 0}
    later = [
        {
            "id": f"{session_id}-turn{k}",
            "session_id": session_id,
            "turn": k,
            "messages": [{"role": "user", "content": text}],
            "metadata": dict(base.get("metadata") or {}),
        }
        | ({"task": base["task"]} if "task" in base else {})
        for k, text in enumerate(user_texts[1:], start=1)
    ]
    return [first, *later]


class MTBenchParser(_PromptParser):
    name = "mtbench"
    label = "MT-Bench / Spec-Bench / Vicuna-Bench questions (question_id, category, turns)"
    task = "chat"

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        return (
            isinstance(first, dict) and "turns" in first and ("question_id" in first or "category" in first)
        )

    def convert(self, line: int, item: dict, ctx: ParseContext) -> dict | list[dict] | None:
        turns = item.get("turns")
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
            ctx.errors.add(line, "turns", "must be a non-empty list of strings")
            return None
        qid = item.get("question_id", f"q{line}")
        category = item.get("category")
        metadata: dict[str, Any] = {"question_id": qid}
        if category is not None:
            metadata["category"] = category
        if len(turns) > 1 and ctx.turns == "first":
            metadata["later_turns"] = turns[1:]
        data: dict[str, Any] = {
            "id": qid,
            "messages": [{"role": "user", "content": turns[0]}],
            "metadata": metadata,
        }
        if isinstance(category, str) and category in CATEGORY_TASKS:
            data["task"] = ctx.default_task or CATEGORY_TASKS[category]
        if ctx.turns == "all" and len(turns) > 1:
            return session_turns(data, turns)
        return data


class ShareGPTParser(_PromptParser):
    name = "sharegpt"
    label = "ShareGPT conversations (id, conversations: [{from, value}])"
    task = "chat"

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        return isinstance(first, dict) and isinstance(first.get("conversations"), list)

    def convert(self, line: int, item: dict, ctx: ParseContext) -> dict | list[dict] | None:
        turns = item.get("conversations")
        if not isinstance(turns, list):
            ctx.errors.add(line, "conversations", "must be a list of {from, value} turns")
            return None
        first = next(
            (i for i, t in enumerate(turns) if isinstance(t, dict) and t.get("from") in ("human", "user")),
            None,
        )
        if (
            first is None
            or not isinstance(turns[first].get("value"), str)
            or not turns[first]["value"].strip()
        ):
            ctx.errors.add(line, "conversations", "has no human turn with text")
            return None
        metadata: dict[str, Any] = {}
        if len(turns) > first + 1 and ctx.turns == "first":
            metadata["later_turns"] = turns[first + 1 :]
        data = {
            "id": item.get("id", f"sharegpt-{line}"),
            "messages": [{"role": "user", "content": turns[first]["value"]}],
            "metadata": metadata,
        }
        if ctx.turns != "all":
            return data
        user_texts = []
        for t in turns[first:]:
            if not isinstance(t, dict) or t.get("from") not in ("human", "user"):
                continue  # the recorded answers: the replay uses each arm's own instead
            if not isinstance(t.get("value"), str) or not t["value"].strip():
                ctx.notes["sessions_cut"] += 1  # an empty turn ends the session (real dumps have a few)
                break
            user_texts.append(t["value"])
        return session_turns(data, user_texts) if len(user_texts) > 1 else data


class HumanEvalParser(_PromptParser):
    name = "humaneval"
    label = "HumanEval (task_id, prompt, entry_point, test)"
    task = "code"

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        return (
            isinstance(first, dict) and "prompt" in first and ("task_id" in first or "entry_point" in first)
        )

    def convert(self, line: int, item: dict, ctx: ParseContext) -> dict | None:
        prompt = _text(line, item, "prompt", ctx)
        if prompt is None:
            return None
        metadata = {k: item[k] for k in ("entry_point", "test") if k in item}
        return {"id": item.get("task_id", f"humaneval-{line}"), "prompt": prompt, "metadata": metadata}


_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer"}
_BFCL_TYPES |= {"str": "string", "bool": "boolean"}


def bfcl_parameters(schema: Any) -> Any:
    """BFCL's Python-flavoured parameter types as JSON Schema (dict -> object, float -> number, ...)."""
    if isinstance(schema, list):
        return [bfcl_parameters(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            if value == "any":
                continue
            out[key] = _BFCL_TYPES.get(value, value)
        elif key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {k: bfcl_parameters(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
            out[key] = bfcl_parameters(value)
        else:
            out[key] = value
    return out


_TOOL_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class BFCLParser(_PromptParser):
    name = "bfcl"
    label = "BFCL function calling (id, question, function)"
    task = "tool_call"

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        return isinstance(first, dict) and "question" in first and "function" in first

    def convert(self, line: int, item: dict, ctx: ParseContext) -> dict | None:
        question = item.get("question")
        turns = question if isinstance(question, list) else None
        first = turns[0] if turns else None
        if not isinstance(first, list) or not first or not all(isinstance(m, dict) for m in first):
            ctx.errors.add(line, "question", "must be a list of turns, each a list of chat messages")
            return None
        functions = item.get("function")
        if not isinstance(functions, list) or not all(isinstance(f, dict) for f in functions):
            ctx.errors.add(line, "function", "must be a list of function definitions")
            return None
        tools = []
        for f in functions:
            function: dict[str, Any] = {"name": _TOOL_NAME.sub("_", str(f.get("name", "")))[:64]}
            if isinstance(f.get("description"), str):
                function["description"] = f["description"]
            if "parameters" in f:
                function["parameters"] = bfcl_parameters(f["parameters"])
            tools.append({"type": "function", "function": function})
        metadata: dict[str, Any] = {"function_names": [f.get("name") for f in functions]}
        if len(turns or []) > 1:
            metadata["later_turns"] = turns[1:]  # type: ignore[index]
        return {"id": item.get("id", f"bfcl-{line}"), "messages": first, "tools": tools, "metadata": metadata}


JSON_INSTRUCTION = "Generate a JSON object that conforms to this JSON Schema:\n"


class JSONSchemaSetParser(_PromptParser):
    name = "jsonschema"
    label = "JSON-schema set (schema per line, as JSONSchemaBench)"
    task = "json"

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        return (
            isinstance(first, dict)
            and "schema" in first
            and "messages" not in first
            and "prompt" not in first
        )

    def convert(self, line: int, item: dict, ctx: ParseContext) -> dict | None:
        schema = item.get("schema")
        if not isinstance(schema, dict | bool):
            ctx.errors.add(line, "schema", "must be a JSON Schema object")
            return None
        subset = str(item.get("subset", "schema"))
        name = _TOOL_NAME.sub("_", f"{subset}_{line}")[:64]
        text = JSON_INSTRUCTION + json.dumps(schema, ensure_ascii=False)
        metadata = {k: item[k] for k in ("subset", "source_path") if k in item}
        return {
            "id": item.get("id", item.get("source_path", f"schema-{line}")),
            "messages": [{"role": "user", "content": text}],
            "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema}},
            "metadata": metadata,
        }


class GSM8KParser(_PromptParser):
    name = "gsm8k"
    label = "GSM8K (question, answer)"
    task = "math"

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        return (
            isinstance(first, dict) and "question" in first and "answer" in first and "function" not in first
        )

    def convert(self, line: int, item: dict, ctx: ParseContext) -> dict | None:
        question = _text(line, item, "question", ctx)
        if question is None:
            return None
        metadata: dict[str, Any] = {}
        answer = item.get("answer")
        if isinstance(answer, str) and "####" in answer:
            metadata["reference_answer"] = answer.rsplit("####", 1)[1].strip()
        return {
            "id": item.get("id", f"gsm8k-{line}"),
            "messages": [{"role": "user", "content": question}],
            "metadata": metadata,
        }


class PromptListParser(_PromptParser):
    name = "prompt_list"
    label = "JSON array of prompt strings"
    wants_object = False

    @classmethod
    def sniff(cls, first: Any, *, filename: str) -> bool:
        return isinstance(first, str)

    def parse(self, file: IO[bytes], ctx: ParseContext) -> Iterator[Record]:
        self._index = 0
        yield from super().parse(file, ctx)

    def convert(self, line: int, item: Any, ctx: ParseContext) -> dict | None:
        self._index += 1
        if not isinstance(item, str) or not item.strip():
            ctx.errors.add(line, None, f"item {self._index} must be a non-empty prompt string")
            return None
        return {"id": f"prompt-{self._index}", "prompt": item, "metadata": {}}
