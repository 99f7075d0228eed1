"""A request's columns as an import stores them: the row's order, the JSON columns as canonical
text (written by COPY as is, and hashed), and the text each request adds to the trace's content hash."""

from __future__ import annotations

from console.jsonutil import canonical_json

ROW_FIELDS = (
    "position",
    "request_id",
    "arrival_s",
    "prompt",
    "messages",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "task",
    "traffic_class",
    "response_format",
    "tools",
    "metadata",
    "prompt_tokens",
    "split",
    "source_index",
    "session_id",
    "turn",
    "think_time_s",
)
JSON_FIELDS = ("messages", "response_format", "tools", "metadata")
JSON_POSITIONS = (4, 11, 12, 13)  # where the JSON columns sit in a row (unpacked by position: fast)
assert tuple(ROW_FIELDS.index(f) for f in JSON_FIELDS) == JSON_POSITIONS


class NotFiniteError(ValueError):
    """A JSON column holds a number that is not finite: JSON has none, and a jsonb column refuses it."""

    message = "holds a number that is not finite (such as 1e999, beyond a double): numbers must be finite"

    def __init__(self, field: str):
        super().__init__(f"{field} {self.message}")
        self.field = field


def json_texts(row: tuple) -> tuple[str | None, str | None, str | None, str]:
    """The row's JSON columns (``JSON_FIELDS`` order) as canonical text, None where the column is
    null. A number that is not finite (Parquet holds NaN; 1e999 is inf) raises NotFiniteError naming
    the column, for the importer to report on its line."""
    messages, response_format, tools, metadata = row[4], row[11], row[12], row[13]  # JSON_POSITIONS
    field = "messages"
    try:
        messages_text = None if messages is None else canonical_json(messages)
        field = "response_format"
        format_text = None if response_format is None else canonical_json(response_format)
        field = "tools"
        tools_text = None if tools is None else canonical_json(tools)
        field = "metadata"
        metadata_text = canonical_json(metadata)
    except ValueError:
        raise NotFiniteError(field) from None
    return messages_text, format_text, tools_text, metadata_text


def content_key(row: tuple, texts: tuple[str | None, str | None, str | None, str]) -> str:
    """The text a request adds to the trace's content hash: its fields joined by \\x1f, None as ""
    for text and repr() for numbers. It never changes: stored traces keep their content hash."""
    # by position (ROW_FIELDS): [1] request id, [2] arrival (s), [3] prompt, [5] max_tokens, [6] temperature,
    # [7] top_p, [8] seed, [9] task, [10] traffic class, [14] prompt tokens, [17:20] session, turn, think time
    messages_text, format_text, tools_text, metadata_text = texts
    key = (
        f"{row[1]}\x1f{row[2]!r}\x1f{row[3] or ''}\x1f{messages_text or ''}\x1f{format_text or ''}"
        f"\x1f{tools_text or ''}\x1f{metadata_text}\x1f{row[5]}\x1f{row[6]!r}\x1f{row[7]!r}"
        f"\x1f{row[8]!r}\x1f{row[9]}\x1f{row[10]}\x1f{row[14]}"
    )
    # single-turn requests hash as before sessions existed: stored traces keep their hash
    session_id, turn = row[17], row[18]
    if turn or session_id != row[1]:
        key = f"{key}\x1f{session_id}\x1f{turn}\x1f{row[19]!r}"
    return key
