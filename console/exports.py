"""Making user text safe in the documents the console hands out: CSV cells, Markdown and links.

Every export that writes text a user typed (trace ids, prompts and outputs in results.csv; titles,
rationale, notes and comments in a decision's Markdown) goes through these, so a cell cannot become a
spreadsheet formula, a comment cannot forge a "Sign-off" heading, and a link cannot leave this site.
"""

from __future__ import annotations

import re
from typing import Any

# A spreadsheet evaluates a cell starting with these as a formula (OWASP "CSV injection"); tab and CR
# are there because some spreadsheets drop them and then see the character after.
CSV_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
# Inside a cell, a formula can start after a separator: a spreadsheet that splits on ; or tab (the
# list separator of many locales, whatever the file's own delimiter) or one that ignores the quoting
# reads "x;=cmd|' /C calc'!A0" as two cells, the second a formula. So a formula character after a
# separator (and any spaces or double quotes) gets a ``'`` before it too, unless what follows is a plain
# number up to the next separator ("1;-2;3" is data).
_INNER_FORMULA = re.compile(r"""([,;\t\r\n][ "]*)([=+\-@])""")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[ ]*(?=[,;\t\r\n]|$)")


def _inner_formula(match: re.Match) -> str:
    lead, sign = match.groups()
    if sign in "+-" and _PLAIN_NUMBER.match(match.string, match.start(2)):
        return match.group(0)
    return f"{lead}'{sign}"


def csv_cell(value: Any) -> Any:
    """``value`` for a CSV cell: text that a spreadsheet would run as a formula, at its start or
    after a separator inside it, gets a ``'`` before the formula character.

    Numbers are left alone (a negative number is data, not a formula); only strings can carry one.
    """
    if not isinstance(value, str):
        return value
    if value.startswith(CSV_FORMULA_PREFIXES):
        value = "'" + value
    return _INNER_FORMULA.sub(_inner_formula, value)


# Markdown punctuation that acts anywhere in a line: emphasis, code, tables, strikethrough; "](", "]["
# and "]:" close a link or a reference ("[" alone opens nothing, so "[redacted]" stays as typed).
_MD_INLINE = re.compile(r"([\\`*_|~]|\](?=[(\[:]))")
# ...and what acts only at the start of a line: headings and list markers (followed by a space or the
# end), setext underlines and thematic breaks, blockquotes, link reference definitions.
_MD_LINE_START = re.compile(
    r"^(\s*)(?:(#|[-+](?=\s|$)|>|\[|[=-]+\s*$)|(\d{1,9})([.)])(?=\s|$))", re.MULTILINE
)


def _md_escape(text: str) -> str:
    # HTML first, as entities (every Markdown flavour shows them as text): no tag, comment or entity
    # can start without "<" or "&". Then Markdown.
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    text = _MD_INLINE.sub(r"\\\1", text)
    return _MD_LINE_START.sub(_line_start, text)


def _line_start(match: re.Match) -> str:
    indent, mark, number, dot = match.groups()
    return f"{indent}\\{mark}" if mark else f"{indent}{number}\\{dot}"


def markdown_inline(value: Any) -> str:
    """``value`` as literal Markdown text on one line (a heading, a list item, a table cell).

    Line breaks become spaces, so the text cannot start a new block; no character of it can make a
    heading, a list, a link, emphasis, a table column or HTML.
    """
    text = " ".join(str(value).split())
    return _md_escape(text)


def markdown_block(value: Any) -> str:
    """``value`` as literal Markdown paragraphs (rationale, rollback steps): the line breaks are kept,
    every line is escaped as :func:`markdown_inline` escapes one, and leading indentation (which would
    make a code block) is dropped."""
    lines = [line.strip() for line in str(value).replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(_md_escape(line) for line in lines)


def markdown_code(value: Any) -> str:
    """A hash or an identifier in a code span; anything a backtick could break out of is escaped text."""
    text = str(value)
    if re.fullmatch(r"[A-Za-z0-9_.:/+-]{1,200}", text):
        return f"`{text}`"
    return markdown_inline(text)


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def site_path_problem(value: str) -> str | None:
    """Why ``value`` may not be stored as a link or name of a policy, or None.

    A link must be a path on this site (``/policies/12/``): never another host (``//host``, ``/\\host``,
    which browsers read as ``//host``), never a scheme (``http:``, ``javascript:``, ``data:``).
    """
    text = value.strip()
    if not text:
        return None
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return "must not contain control characters (tabs, line breaks)"
    if text.startswith(("//", "\\", "/\\")) or _SCHEME.match(text):
        return "give a path on this site (like /policies/12/) or a name, not a link to another site"
    return None


def site_path(value: str) -> str:
    """``value`` when it is a safe path on this site to link to, else ``""`` (show it as text)."""
    text = value.strip()
    if text.startswith("/") and site_path_problem(text) is None and not re.search(r"\s", text):
        return text
    return ""
