"""One way to show a number: every page, export and message formats rates, ratios, durations,
money, sizes and counts through these functions, so a quantity reads the same everywhere.

Rules, the same for every kind:
- a missing value is a dash ("—"), never "None" or "nan";
- a unit always follows the number (a bare count is the only number without one);
- at most three significant digits (a count is exact, with thousands separators);
- a quantity is clamped to what it can take (a rate to [0, 100 %], a ratio to >= 0, a relative
  change to >= -100 %), so an interval computed on the linear scale never shows the impossible.

``show(value, unit)`` dispatches on the unit names the summaries store ("s", "ms", "fraction",
"%", "x", "pp", "$", "bytes", "count", "p", "req/s", ...); the template filters in
``console.number_filters`` are these functions under short names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

DASH = "—"


def _missing(value: Any) -> bool:
    if value is None or value == "" or isinstance(value, bool):
        return True
    try:
        return not math.isfinite(float(value))
    except (TypeError, ValueError):
        return True


def _sig(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits without an exponent (large values whole)."""
    if x == 0:
        return "0"
    if abs(x) >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    text = f"{x:.{decimals}f}"
    if float(text) != 0 and len(text.replace("-", "").replace(".", "").lstrip("0")) > digits:
        text = f"{x:.{max(0, decimals - 1)}f}"  # rounding carried into a new digit (9.996 -> 10.00)
    return text


def _signed(text: str, x: float, signed: bool) -> str:
    return f"+{text}" if signed and x > 0 else text


def number(value: Any, unit: str = "", *, signed: bool = False) -> str:
    """A plain quantity to three significant digits, then its unit ("3.14 tok/s")."""
    if _missing(value):
        return DASH
    x = float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return count(value, unit)
    text = _signed(_sig(x), x, signed)
    return f"{text} {unit}" if unit else text


def count(value: Any, unit: str = "") -> str:
    """A whole number, exact, with thousands separators ("12,345 requests")."""
    if _missing(value):
        return DASH
    text = f"{round(float(value)):,}"
    return f"{text} {unit}" if unit else text


def duration(seconds: Any, *, signed: bool = False) -> str:
    """Seconds: below one as milliseconds ("85.7 ms"), else seconds ("1.23 s"), minutes from 100 s."""
    if _missing(seconds):
        return DASH
    s = float(seconds)
    if abs(s) < 1:
        return _signed(_sig(s * 1000), s, signed) + " ms"
    if abs(s) < 100:
        return _signed(_sig(s), s, signed) + " s"
    minutes, rest = divmod(abs(s), 60)
    sign = "-" if s < 0 else ("+" if signed else "")
    return f"{sign}{minutes:.0f} min {rest:.0f} s"


def milliseconds(seconds: Any, *, signed: bool = False) -> str:
    """Seconds always shown as milliseconds (a column whose neighbours are all milliseconds)."""
    if _missing(seconds):
        return DASH
    s = float(seconds) * 1000
    return _signed(_sig(s), s, signed) + " ms"


def rate(fraction: Any) -> str:
    """A share in [0, 1] as a percentage ("66.7%"), clamped to [0 %, 100 %]."""
    if _missing(fraction):
        return DASH
    text = _sig(100 * min(1.0, max(0.0, float(fraction))))
    return (text.rstrip("0").rstrip(".") if "." in text else text) + "%"


def points(difference: Any) -> str:
    """A difference of two rates (fractions) in percentage points, signed ("+15.0 pp")."""
    if _missing(difference):
        return DASH
    d = max(-1.0, min(1.0, float(difference))) * 100
    return _signed(f"{d:.1f}", d, True) + " pp"


def ratio(value: Any) -> str:
    """A ratio of two non-negative quantities, clamped at 0 ("1.40x")."""
    if _missing(value):
        return DASH
    x = max(0.0, float(value))
    return f"{x:.2f}x" if x < 100 else f"{_sig(x)}x"


def change(value: Any) -> str:
    """A ratio as a relative change ("+39.6%"), never below -100 %."""
    if _missing(value):
        return DASH
    d = (max(0.0, float(value)) - 1) * 100
    return _signed(_sig(d), d, True) + "%"


def money(usd: Any) -> str:
    """Dollars to three significant digits ("$0.00123", "$12.3", "$1,234")."""
    if _missing(usd):
        return DASH
    x = float(usd)
    return f"-${_sig(-x)}" if x < 0 else f"${_sig(x)}"


def size(n_bytes: Any) -> str:
    """Bytes in binary units ("1.40 GiB", "512 MiB")."""
    if _missing(n_bytes):
        return DASH
    x = float(n_bytes)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(x) >= scale:
            return f"{_sig(x / scale)} {unit}"
    return f"{x:.0f} B"


def p_value(p: Any) -> str:
    """A probability (a test's p-value) to three significant digits without trailing zeros
    ("0.0792", "1"); below 0.0001 as "< 0.0001", clamped to [0, 1]."""
    if _missing(p):
        return DASH
    x = min(1.0, max(0.0, float(p)))
    if x < 1e-4:
        return "< 0.0001"
    text = _sig(x)
    return text.rstrip("0").rstrip(".") if "." in text else text


def plus_minus(width: Any, unit: str = "") -> str:
    """A symmetric half-width (a noise floor) in ``unit``: "±4.50 ms", "±1.5 pp" (``unit`` "pp"
    takes a difference of fractions), "±13.2%" (``unit`` "%" takes a fraction, never clamped:
    a floor can exceed the value it floats on)."""
    if _missing(width):
        return DASH
    w = abs(float(width))
    if unit == "pp":
        return f"±{_sig(w * 100)} pp"
    if unit in ("%", "fraction"):
        return f"±{_sig(w * 100)}%"
    return f"±{show(w, unit)}"


def interval(lo: Any, hi: Any, unit: str = "") -> str:
    """Two bounds in one unit ("[0.44x, 0.64x]"); an open bound is a dash."""
    return f"[{show(lo, unit)}, {show(hi, unit)}]"


_BY_UNIT: dict[str, Callable[[Any], str]] = {
    "s": duration,
    "ms": milliseconds,
    "fraction": rate,
    "%": rate,
    "rate": rate,
    "x": ratio,
    "ratio": ratio,
    "change": change,
    "pp": points,
    "$": money,
    "usd": money,
    "bytes": size,
    "count": count,
    "p": p_value,
}


def show(value: Any, unit: str = "") -> str:
    """``value`` in ``unit`` by the rules above; a list shows each item, joined by " / "."""
    if isinstance(value, (list, tuple)):
        return " / ".join(show(v, unit) for v in value) or DASH
    formatter = _BY_UNIT.get(unit)
    if formatter is not None:
        return formatter(value)
    return number(value, unit)
