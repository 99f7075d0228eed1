"""Failed-attempt throttling in the cache (Redis in production, local memory in tests).

A fixed window per key: the first failure opens a window of ``SPECREVIEW_LOGIN_LOCKOUT_MINUTES``;
``SPECREVIEW_LOGIN_MAX_FAILURES`` failures inside it lock the key until the window ends. Logins
are keyed by the account's username (as Django matches it) + client address; bad API tokens by
client address and, separately, by token prefix (a valid token is never refused: see
``console.accounts.services.api_token_authenticate``).

The client address is the peer's, or, when the peer is one of ``SPECREVIEW_TRUSTED_PROXIES``,
the address that proxy saw (``X-Forwarded-For``): never a header a client could write itself.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import math
import time

from django.conf import settings
from django.core.cache import cache

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


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


@functools.cache
def _networks(proxies: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def client_address(request) -> str:
    """The client's address: the peer's (``REMOTE_ADDR``), unless the peer is a trusted proxy
    (``SPECREVIEW_TRUSTED_PROXIES``); then the right-most ``X-Forwarded-For`` entry that is not a
    trusted proxy itself: the address the outermost trusted proxy saw. Entries to its left were
    written by the client and are never read. A malformed entry stops the walk at the hop before it."""
    peer = request.META.get("REMOTE_ADDR", "") or "unknown"
    proxies = _networks(tuple(getattr(settings, "SPECREVIEW_TRUSTED_PROXIES", ()) or ()))
    if not proxies:
        return peer

    def trusted(addr) -> bool:
        return addr is not None and any(addr in net for net in proxies)

    if not trusted(_address(peer)):
        return peer
    client = peer
    for entry in reversed(request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        addr = _address(entry)
        if addr is None:
            break
        client = str(addr)
        if not trusted(addr):
            break
    return client


def minutes_text(seconds: int) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    return f"{minutes} minute{'s' if minutes != 1 else ''}"
