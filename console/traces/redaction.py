"""Redaction at import: named patterns in a trace's text replaced by typed placeholders.

Production prompts carry e-mail addresses, phone numbers, card numbers, keys and addresses. When an
import asks for redaction, every string of every request (prompt, messages, tools, the reference
output, metadata) passes through :class:`RequestRedactor` before anything is stored, so the
database, the replay and every export only ever see the placeholders.

* **Typed and consistent within a request**: the first e-mail address of a request becomes
  ``[EMAIL_1]``, the second distinct one ``[EMAIL_2]``, and a repeat of the first is ``[EMAIL_1]``
  again, so a prompt that says "reply to a@x.org ... cc a@x.org" still makes sense. Numbering
  restarts with each request: placeholders say nothing across requests.
* **Built-in kinds** (:data:`KINDS`), in the order they apply: ``KEY`` (bearer tokens and
  well-known API key shapes: OpenAI/Anthropic ``sk-``, Hugging Face ``hf_``, GitHub ``ghp_``...,
  AWS ``AKIA``, Google ``AIza``, Slack ``xox?-``, JWTs), ``EMAIL``, ``CARD`` (13-19 digits, spaces
  or dashes between groups, Luhn-valid: order numbers that fail the checksum stay), ``IP`` (IPv4
  with octets <= 255, and full or ``::``-compressed IPv6), ``PHONE`` (an optional ``+`` country
  code, then 7-15 digits in groups; a bare run of digits without a separator or ``+`` stays,
  since ids and counts look like that).
* **A team's own patterns** (:func:`patterns_parse`): ``NAME=REGEX`` lines; NAME in capitals,
  digits and ``_``. They run after the built-in kinds through the ``regex`` module with a time
  limit per string (:data:`PATTERN_TIMEOUT_S`), so a pattern that backtracks catastrophically is
  refused with a clear error instead of hanging an import.

Pure Python; no Django. Counts are per kind, over the whole trace.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import regex

PATTERN_TIMEOUT_S = 0.25  # per string and pattern: a linear pattern takes microseconds
MAX_PATTERNS = 20
MAX_PATTERN_CHARS = 500
_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")

_KEY = re.compile(
    r"(?i:\bbearer\s+)[A-Za-z0-9._~+/=\-]{8,}"
    r"|\b(?:sk|pk|rk)-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{16,}"
    r"|\bhf_[A-Za-z0-9]{20,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"
    r"|\bAIza[0-9A-Za-z_\-]{35}"
    r"|\bxox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
)
_EMAIL = re.compile(
    r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}\b"
)
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
# Not next to a letter or digit: ``std::vector`` holds ``d::``, which is a valid IPv6 address.
_IPV6 = re.compile(r"(?<![0-9A-Za-z:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![0-9A-Za-z:])")
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .\-]?)?(?:\(\d{1,4}\)[ .\-]?)?\d{2,4}(?:[ .\-]\d{2,4}){1,4}(?!\w)"
)


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_ok(text: str) -> bool:
    digits = re.sub(r"\D", "", text)
    return 13 <= len(digits) <= 19 and _luhn(digits)


def _ip_ok(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    # IPv6: three groups, or two with one of 3+ digits, so code's ``::`` and ``a::b`` stay.
    groups = [g for g in text.split(":") if g]
    return text.count(".") == 3 or len(groups) >= 3 or (len(groups) == 2 and max(map(len, groups)) >= 3)


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_THOUSANDS = re.compile(r"^\d{1,3}(?:([ .,])\d{3})(?:\1\d{3})*$")


def _phone_ok(text: str) -> bool:
    """7-15 digits, with a ``+``, parentheses or separators; not a date or a number in thousands."""
    digits = re.sub(r"\D", "", text)
    if not 7 <= len(digits) <= 15 or _ISO_DATE.match(text) or _THOUSANDS.match(text):
        return False
    return text.startswith(("+", "(")) or bool(re.search(r"[ .\-]", text))


@dataclass(frozen=True)
class Kind:
    name: str
    pattern: Any  # re.Pattern or regex.Pattern
    check: Callable[[str], bool] | None = None


KINDS: tuple[Kind, ...] = (
    Kind("KEY", _KEY),
    Kind("EMAIL", _EMAIL),
    Kind("CARD", _CARD, _card_ok),
    Kind("IP", _IPV4, _ip_ok),
    Kind("IP", _IPV6, _ip_ok),
    Kind("PHONE", _PHONE, _phone_ok),
)
_PLACEHOLDER = re.compile(r"^\[[A-Z][A-Z0-9_]*_\d+\]$")


class RedactionError(ValueError):
    """A team pattern that cannot be used: the message says which line and why."""


def patterns_parse(text: str) -> tuple[Kind, ...]:
    """A team's own patterns, one ``NAME=REGEX`` a line (blank lines and ``#`` comments skipped)."""
    kinds: list[Kind] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, source = line.partition("=")
        name = name.strip()
        if not sep or not source:
            raise RedactionError(f"redaction pattern line {number}: write NAME=REGEX")
        if not _NAME.match(name):
            raise RedactionError(
                f"redaction pattern line {number}: name {name[:40]!r} must be capitals, digits and _ (at most 32)"
            )
        if len(source) > MAX_PATTERN_CHARS:
            raise RedactionError(
                f"redaction pattern line {number}: longer than {MAX_PATTERN_CHARS} characters"
            )
        try:
            compiled = regex.compile(source)
        except regex.error as exc:
            raise RedactionError(
                f"redaction pattern line {number} ({name}): not a regular expression: {exc}"
            ) from None
        if compiled.search(""):
            raise RedactionError(f"redaction pattern line {number} ({name}): matches the empty string")
        kinds.append(Kind(name, compiled))
        if len(kinds) > MAX_PATTERNS:
            raise RedactionError(f"at most {MAX_PATTERNS} redaction patterns")
    return tuple(kinds)


@dataclass
class RequestRedactor:
    """Redacts the strings of one request; placeholders numbered per kind, stable within it."""

    kinds: tuple[Kind, ...]
    counts: Counter[str]
    seen: dict[tuple[str, str], str] = field(default_factory=dict)

    def text(self, text: str) -> str:
        for kind in self.kinds:
            text = self._kind(kind, text)
        return text

    def _kind(self, kind: Kind, text: str) -> str:
        def replace(match: Any) -> str:
            found = match.group(0)
            if _PLACEHOLDER.match(found) or (kind.check is not None and not kind.check(found)):
                return str(found)
            key = (kind.name, found)
            if key not in self.seen:
                number = 1 + sum(1 for name, _ in self.seen if name == kind.name)
                self.seen[key] = f"[{kind.name}_{number}]"
            self.counts[kind.name] += 1
            return self.seen[key]

        if isinstance(kind.pattern, re.Pattern):
            return kind.pattern.sub(replace, text)
        try:
            return str(kind.pattern.sub(replace, text, timeout=PATTERN_TIMEOUT_S))
        except TimeoutError:
            raise RedactionError(
                f"redaction pattern {kind.name} took over {PATTERN_TIMEOUT_S} s on one string "
                "(catastrophic backtracking?): simplify it"
            ) from None

    def value(self, value: Any) -> Any:
        """``value`` with every string in it redacted (dict keys kept: they are structure)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.value(v) for v in value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value


@dataclass
class Redactor:
    """One import's redaction: the kinds it applies and how many of each it replaced."""

    extra: tuple[Kind, ...] = ()
    counts: Counter[str] = field(default_factory=Counter)

    def request(self) -> RequestRedactor:
        return RequestRedactor(kinds=KINDS + self.extra, counts=self.counts)

    def summary(self) -> dict[str, int]:
        """Replacements per kind (placeholders written, repeats included), largest first."""
        return dict(sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0])))


# The fields of a request that hold text a person wrote or a model produced; ``tools`` and
# ``response_format`` are schemas (a pattern in them is structure), ids and numbers are not text.
TEXT_FIELDS = ("prompt", "messages", "metadata")


def record_redact(data: dict[str, Any], *, redactor: Redactor) -> dict[str, Any]:
    """A request's record with its text fields (:data:`TEXT_FIELDS`) redacted, as one request."""
    one = redactor.request()
    return {k: one.value(v) if k in TEXT_FIELDS else v for k, v in data.items()}


KIND_WORDS = {
    "KEY": ("key or token", "keys or tokens"),
    "EMAIL": ("e-mail address", "e-mail addresses"),
    "CARD": ("card number", "card numbers"),
    "IP": ("IP address", "IP addresses"),
    "PHONE": ("phone number", "phone numbers"),
}


def redaction_sentence(replaced: dict[str, int]) -> str:
    """What an import's redaction replaced, in words: "Redacted 3 e-mail addresses and 1 key or token."."""
    if not replaced:
        return "Redaction found nothing to replace."
    parts = []
    for name, count in replaced.items():
        one, many = KIND_WORDS.get(name, (f"{name} match", f"{name} matches"))
        parts.append(f"{count:,} {one if count == 1 else many}")
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"
    return f"Redacted {listed}."


def redact_texts(texts: Iterable[str], *, extra: tuple[Kind, ...] = ()) -> list[str]:
    """Each text redacted as one request of its own (tests, previews)."""
    redactor = Redactor(extra=extra)
    return [redactor.request().text(t) for t in texts]
