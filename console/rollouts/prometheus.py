"""Instant queries against an operator's Prometheus, for a guarded rollout's rollback triggers.

A trigger's query is a PromQL template: ``$pool`` stands for one pool's label matchers (placed
inside braces, possibly after others: ``{model_name="x",$pool}``) and ``$window`` for a
Prometheus duration (``10m``). Each look renders it once per pool (candidate, control) and asks
for one number. The pool selector is typed by an operator, so it is checked to be label matchers
and nothing else before it is spliced into a query: a selector cannot close the braces and add
PromQL of its own.

No Django here: the caller passes the server's URL and token from settings.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any
from urllib.parse import urlsplit

import httpx

MAX_RESPONSE_BYTES = 1024 * 1024
MAX_MESSAGE_CHARS = 300

_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
# A double-quoted PromQL string: any character but a quote, a backslash or a control character,
# or one of Go's escapes (PromQL unquotes strings with Go's rules).
_STRING = r'"(?:[^"\\\x00-\x1f\x7f]|\\[abfnrtv\\"\']|\\x[0-9a-fA-F]{2}|\\[0-7]{3}|\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8})*"'
_MATCHER = re.compile(rf"\s*({_LABEL})\s*(=~|!~|!=|=)\s*({_STRING})\s*")
_PLACEHOLDER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


class PrometheusError(Exception):
    """A query that gave no number: the message names the server (never its token) and says
    what Prometheus answered, so the operator can fix the query or the server."""


def pool_selector_check(text: str) -> str:
    """An operator's pool selector, checked to be comma-separated Prometheus label matchers
    (``pool="candidate"``, ``pod=~"web-.*"``, ``!=``, ``!~``) and returned normalised
    (``name="value",name=~"value"``). Raises ValueError naming the problem otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"a pool selector is text, got {type(text).__name__}")
    if any(ch in text for ch in "\r\n"):
        raise ValueError("a pool selector is one line: it has a line break")
    matchers: list[str] = []
    position = 0
    while True:
        found = _MATCHER.match(text, position)
        if found is None:
            rest = text[position:].strip()
            if not rest:
                problem = "is empty" if not matchers else "ends with a comma"
                raise ValueError(f'the pool selector {problem}: write label matchers like pool="candidate"')
            raise ValueError(
                f"the pool selector is not label matchers at {rest[:40]!r}: write "
                'name="value" (or =~, !=, !~ with a double-quoted value), separated by commas'
            )
        name, op, value = found.groups()
        if name.startswith("__"):
            raise ValueError(f"the pool selector may not match the reserved label {name!r}")
        matchers.append(f"{name}{op}{value}")
        position = found.end()
        if position == len(text):
            return ",".join(matchers)
        if text[position] != ",":
            raise ValueError(
                f"the pool selector has {text[position : position + 40]!r} after a matcher: "
                "separate matchers with commas, nothing else"
            )
        position += 1


def window_duration(minutes: float) -> str:
    """A window of ``minutes`` as a Prometheus duration: ``10m``, ``90s`` or ``1500ms`` (rounded to
    the millisecond). Raises ValueError for a window that is not finite or not positive."""
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not math.isfinite(minutes):
        raise ValueError(f"a window is a finite number of minutes, got {minutes!r}")
    ms = round(minutes * 60_000)
    if minutes <= 0 or ms <= 0:
        raise ValueError(f"a window must be at least a millisecond, got {minutes!r} minutes")
    if ms % 60_000 == 0:
        return f"{ms // 60_000}m"
    if ms % 1000 == 0:
        return f"{ms // 1000}s"
    return f"{ms}ms"


def query_render(template: str, *, pool: str, window_min: float) -> str:
    """The query ``template`` with ``$pool`` replaced by the checked pool selector and ``$window``
    by ``window_min`` minutes as a Prometheus duration. A template may omit either (an absolute
    query need not name a pool: the caller decides); any other ``$name`` raises ValueError."""
    unknown = sorted({m.group(1) for m in _PLACEHOLDER.finditer(template)} - {"pool", "window"})
    if unknown:
        raise ValueError(f"the query has unknown placeholders {unknown}: use $pool and $window")
    values = {"pool": pool_selector_check(pool), "window": window_duration(window_min)}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def instant_query(
    *,
    url: str,
    query: str,
    timeout_s: float = 10.0,
    bearer_token: str | None = None,
    at: float | None = None,
) -> float | None:
    """One number from Prometheus at ``url`` (its base, e.g. ``http://prometheus:9090``): the
    value of ``query`` evaluated at ``at`` (Unix seconds; now when None). A vector of one sample
    or a scalar gives its value; an empty vector, NaN or +-Inf gives None (no data). Anything
    else (several series, an error, no answer within ``timeout_s`` seconds) raises
    PrometheusError."""
    server = _server_name(url)
    form = {"query": query, "timeout": f"{timeout_s:g}"}
    if at is not None:
        form["time"] = f"{at:.3f}"
    headers = {"Accept": "application/json"}
    if bearer_token and bearer_token.strip():
        token = bearer_token.strip()  # a token file's trailing newline
        if not (token.isascii() and token.isprintable()):
            # httpx would refuse the header quoting it: say so without the token
            raise PrometheusError(
                f"the bearer token for Prometheus at {server} has a control or non-ASCII character"
            )
        headers["Authorization"] = f"Bearer {token}"
    # POST: a long query does not meet a proxy's limit on URL length.
    try:
        with (
            httpx.Client(timeout=timeout_s, follow_redirects=False) as client,
            client.stream("POST", f"{url.rstrip('/')}/api/v1/query", data=form, headers=headers) as response,
        ):
            body = _body_capped(response, server)
            status = response.status_code
    except httpx.TimeoutException:
        raise PrometheusError(f"Prometheus at {server} did not answer within {timeout_s:g} s") from None
    except httpx.InvalidURL:
        raise PrometheusError(f"the Prometheus URL {server} is not a valid URL") from None
    except httpx.HTTPError as exc:
        raise PrometheusError(
            f"cannot reach Prometheus at {server}: {_short(str(exc) or type(exc).__name__)}"
        ) from None
    return _value(body, status=status, server=server)


def _server_name(url: str) -> str:
    """The URL as messages show it: scheme, host, port and path, never a user or password."""
    parts = urlsplit(url)
    if not parts.hostname:
        return repr(_short(url)[:80])  # no host, so no user or password either
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port out of range: httpx refuses the URL, and the message shows it
        port = ":?"
    return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def _body_capped(response: httpx.Response, server: str) -> bytes:
    chunks = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise PrometheusError(
                f"Prometheus at {server} answered more than {MAX_RESPONSE_BYTES // 1024} KiB: "
                "aggregate the query to one series"
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _value(body: bytes, *, status: int, server: str) -> float | None:
    try:
        payload: Any = json.loads(body)
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or payload.get("status") not in ("success", "error"):
        hint = " (check the token)" if status in (401, 403) else ""
        text = body.decode("utf-8", "replace")
        raise PrometheusError(
            f"Prometheus at {server} answered HTTP {status}{hint} without its JSON: {_short(text) or 'empty body'}"
        )
    if payload["status"] == "error":
        kind = payload.get("errorType") or "error"
        raise PrometheusError(
            f"Prometheus at {server} refused the query ({kind}): {_short(str(payload.get('error')))}"
        )
    data = payload.get("data")
    if not isinstance(data, dict):
        raise PrometheusError(f"Prometheus at {server} answered success without data")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        return _number(result, server)
    if kind != "vector":
        raise PrometheusError(
            f"the query gives a {kind}, not one number: a range selector ([5m]) needs a function "
            f"around it (rate, avg_over_time), and the result must be a single series (Prometheus at {server})"
        )
    if not isinstance(result, list):
        raise PrometheusError(f"Prometheus at {server} answered a vector that is not a list")
    if not result:
        return None
    if len(result) > 1:
        raise PrometheusError(
            f"the query returned {len(result)} series: aggregate it (sum, avg, histogram_quantile) "
            f"to one (Prometheus at {server})"
        )
    sample = result[0]
    return _number(sample.get("value") if isinstance(sample, dict) else None, server)


def _number(pair: Any, server: str) -> float | None:
    """A sample's ``[timestamp, "value"]`` as a float; None for NaN and +-Inf."""
    try:
        value = float(pair[1])
    except (TypeError, ValueError, IndexError, KeyError):
        raise PrometheusError(
            f"Prometheus at {server} answered a sample that is not a number: {_short(repr(pair))}"
        ) from None
    return value if math.isfinite(value) else None
