"""Redaction patterns (console/traces/redaction.py): what each kind replaces, and what it leaves."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.traces.redaction import RedactionError, Redactor, patterns_parse, redact_texts


def _one(text: str, **kw) -> str:
    return redact_texts([text], **kw)[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail ada.lovelace+ops@example.co.uk now", "mail [EMAIL_1] now"),
        ("key sk-proj-AbCdEf0123456789xyzXYZ and more", "key [KEY_1] and more"),
        ("Authorization: Bearer abc.DEF-123_456~xyz", "Authorization: [KEY_1]"),
        ("hf token hf_AbCdEfGhIjKlMnOpQrStUv", "hf token [KEY_1]"),
        ("aws AKIAIOSFODNN7EXAMPLE here", "aws [KEY_1] here"),
        ("github ghp_abcdefghijklmnopqrstuvwxyz0123", "github [KEY_1]"),
        ("card 4111 1111 1111 1111 exp", "card [CARD_1] exp"),
        ("card 5500-0000-0000-0004.", "card [CARD_1]."),
        ("host 192.168.10.254 down", "host [IP_1] down"),
        ("v6 2001:db8::8a2e:370:7334 up", "v6 [IP_1] up"),
        ("link fe80::1 local", "link [IP_1] local"),
        ("call +44 20 7946 0958 today", "call [PHONE_1] today"),
        ("call (555) 123-4567 today", "call [PHONE_1] today"),
        ("call 555-123-4567 today", "call [PHONE_1] today"),
    ],
)
def test_it_replaces_each_kind_by_a_typed_placeholder(text, expected):
    assert _one(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "order 4111111111111112 failed the checksum",  # not Luhn-valid: an order number
        "version 1.10.2 of std::vector<int> and a::b",
        "on 2026-12-04 at 12:30:45, 10 000 000 rows, 1,234,567 tokens",
        "octets 999.1.1.1 are no address; python a[1:2:3]",
        "task-management-system-v2 and skeleton-key-holder",
        "request id 20261204123456 and count 42",
    ],
)
def test_it_leaves_text_that_only_looks_alike(text):
    assert _one(text) == text


def test_placeholders_are_consistent_within_a_request_and_restart_with_the_next():
    redactor = Redactor()
    first = redactor.request()
    a = first.text("from a@x.org to b@y.org")
    b = first.text("reply to a@x.org, cc b@y.org and c@z.org")
    second = redactor.request().text("to c@z.org")
    assert (a, b) == ("from [EMAIL_1] to [EMAIL_2]", "reply to [EMAIL_1], cc [EMAIL_2] and [EMAIL_3]")
    assert second == "to [EMAIL_1]"
    assert redactor.summary() == {"EMAIL": 6}


def test_it_redacts_every_string_in_nested_messages_and_keeps_keys():
    value = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "ip 10.0.0.1 mail q@w.io"}]}],
        "metadata": {"owner": "q@w.io", "n": 3},
    }
    out = Redactor().request().value(value)
    assert out == {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "ip [IP_1] mail [EMAIL_1]"}]}],
        "metadata": {"owner": "[EMAIL_1]", "n": 3},
    }


def test_a_team_pattern_runs_after_the_built_in_kinds():
    extra = patterns_parse("# employee ids\nEMPLOYEE=\\bEMP-\\d{6}\\b\n")
    assert _one("EMP-123456 mailed e@x.io", extra=extra) == "[EMPLOYEE_1] mailed [EMAIL_1]"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("EMPLOYEE", "line 1: write NAME=REGEX"),
        ("employee=x", "line 1: name 'employee' must be capitals"),
        ("\nBAD=(", "line 2 (BAD): not a regular expression"),
        ("EMPTY=a*", "matches the empty string"),
        ("LONG=" + "a" * 600, "longer than 500 characters"),
    ],
)
def test_it_refuses_a_bad_team_pattern_saying_which_line(text, message):
    with pytest.raises(RedactionError, match=re.escape(message)):
        patterns_parse(text)


def test_a_catastrophic_team_pattern_is_refused_in_bounded_time_not_hung():
    extra = patterns_parse("SLOW=(a|aa)+b")
    started = time.perf_counter()
    with pytest.raises(RedactionError, match="took over"):
        _one("a" * 80, extra=extra)
    assert time.perf_counter() - started < 5


@settings(max_examples=200, deadline=None)
@given(local=st.from_regex(r"[a-z][a-z0-9._]{0,10}[a-z0-9]", fullmatch=True), text=st.text(max_size=40))
def test_no_planted_address_survives_whatever_surrounds_it(local, text):
    planted = f"{local}@planted-example.org"
    out = _one(f"{text} {planted} {text}")
    assert planted not in out
