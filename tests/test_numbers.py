"""The formatting layer (console.numbers): units always, three significant digits, quantities
clamped to what they can take, a dash for what is missing."""

from __future__ import annotations

import pytest

from console import numbers
from console.words import key_words, metric_words, plain_value


@pytest.mark.parametrize(
    "value, unit, shown",
    [
        (0.0857, "s", "85.7 ms"),
        (12.879, "s", "12.9 s"),
        (1234.5, "s", "20 min 34 s"),
        (0.0123, "ms", "12.3 ms"),
        (0.667, "fraction", "66.7%"),
        (1.2, "%", "100%"),  # a rate never above 100 %
        (-0.2, "%", "0%"),
        (1.396, "x", "1.40x"),
        (-0.3141, "x", "0.00x"),  # a ratio never below 0
        (-1.314, "change", "-100%"),  # a change never below -100 %
        (1.396, "change", "+39.6%"),
        (0.15, "pp", "+15.0 pp"),
        (0.00123, "$", "$0.00123"),
        (1234.5, "$", "$1,234"),
        (1.5 * 2**30, "bytes", "1.50 GiB"),
        (12345, "count", "12,345"),
        (9.996, "", "10.0"),
        (3.14159, "req/s", "3.14 req/s"),
        (7, "tokens", "7 tokens"),
        (None, "s", "—"),
        (float("nan"), "", "—"),
        (float("inf"), "x", "—"),
        (True, "", "—"),
        ([0.0857, None, 1.5], "s", "85.7 ms / — / 1.50 s"),
        (1.0, "p", "1"),
        (0.079213, "p", "0.0792"),
        (0.004, "p", "0.004"),
        (3e-9, "p", "< 0.0001"),
        (None, "p", "—"),
    ],
)
def test_a_value_shows_in_its_unit(value, unit, shown):
    assert numbers.show(value, unit) == shown


def test_an_interval_keeps_both_bounds_in_the_unit_and_inside_what_the_quantity_can_take():
    assert numbers.interval(-0.31, 3.1, "x") == "[0.00x, 3.10x]"
    assert numbers.interval(None, 0.5, "fraction") == "[—, 50%]"


def test_keys_read_as_words_and_values_never_as_reprs():
    assert metric_words("tpot_s", "p95") == "TPOT p95"
    assert key_words("prompt_tokens_bucket") == "prompt length (tokens)"
    assert key_words("some_new_key") == "some new key"
    assert plain_value({"check_server": False, "server": "x"}) == "check server no, server x"
    assert plain_value([0.123456, None]) == "0.123, —"


def test_a_noise_floor_reads_plus_or_minus_in_its_unit_and_a_relative_one_is_never_clamped():
    assert numbers.plus_minus(0.00449, "s") == "±4.49 ms"
    assert numbers.plus_minus(0.0399, "req/s") == "±0.0399 req/s"
    assert numbers.plus_minus(0.015, "pp") == "±1.50 pp"
    assert numbers.plus_minus(1.5, "%") == "±150%"  # a floor can exceed the value it floats on
    assert numbers.plus_minus(-0.2) == "±0.200"
    assert numbers.plus_minus(None, "s") == "—"
