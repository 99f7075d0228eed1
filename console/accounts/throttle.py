"""Failed-attempt throttling in the cache (Redis in production, local memory in tests).

A fixed window per key: the first failure opens a window of ``SPECREVIEW_LOGIN_LOCKOUT_MINUTES``;
``SPECREVIEW_LOGIN_MAX_FAILURES`` failures inside it lock the key until the window ends. Logins
are keyed by username + client address, API token failures by client address alone.
"""

from __future__ import annotations

import hashlib
import math
import time

from django.conf import settings
from django.core.cache import cache


def _keys(scope: str, parts: tuple[str, ...]) -> tuple[str, str]:
    digest = hashlib.sha256("\x1f".join((scope, *parts)).encode()).hexdigest()[:32]
    return f"throttle:{digest}:count", f"throttle:{digest}:until"


def throttle_locked_seconds(*, scope: str, parts: tuple[str, ...]) -> int:
    """Seconds until ``parts`` may try again (0: not locked)."""
    count_key, until_key = _keys(scope, parts)
    count = cache.get(count_key) or 0
    if count < settings.SPECREVIEW_LOGIN_MAX_FAILURES:
        return 0
    until = cache.get(until_key) or 0.0
    return max(0, math.ceil(until - time.time()))


def throttle_failure_record(*, scope: str, parts: tuple[str, ...]) -> int:
    """Count one failure; returns the failures in the current window."""
    count_key, until_key = _keys(scope, parts)
    window = settings.SPECREVIEW_LOGIN_LOCKOUT_MINUTES * 60
    if cache.add(count_key, 0, timeout=window):
        cache.set(until_key, time.time() + window, timeout=window)
    try:
        return cache.incr(count_key)
    except ValueError:  # expired between add and incr: start a new window
        cache.set(count_key, 1, timeout=window)
        cache.set(until_key, time.time() + window, timeout=window)
        return 1


def throttle_reset(*, scope: str, parts: tuple[str, ...]) -> None:
    cache.delete_many(list(_keys(scope, parts)))


def client_address(request) -> str:
    """The peer address as the web server saw it (behind a proxy: the proxy's, so the username
    part of the login key is what separates users)."""
    return request.META.get("REMOTE_ADDR", "") or "unknown"


def minutes_text(seconds: int) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    return f"{minutes} minute{'s' if minutes != 1 else ''}"
