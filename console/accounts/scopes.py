"""What an API token may be used for: its scopes, and the scope each API operation needs.

A token's scopes narrow what its user's role allows; they never widen it. ``read`` covers the
safe methods (GET, HEAD), ``write`` every other method, and ``sign`` the sign-off of a decision
(the operations that need ``accounts.sign_decision``), which ``write`` does not include.

Teams are not here yet: a later change names a team on each token, and a token then acts only
within that team. That is a second check beside :func:`required_scope`, not a new scope.
"""

from __future__ import annotations

from console.accounts import roles

READ = "read"
WRITE = "write"
SIGN = "sign"
# In the order pages and messages list them.
SCOPES: tuple[str, ...] = (READ, WRITE, SIGN)
# What a new token gets unless sign is asked for.
DEFAULT_SCOPES: tuple[str, ...] = (READ, WRITE)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def required_scope(*, method: str, capability: str | None) -> str:
    """The scope a token needs to call an operation with ``method`` that needs ``capability``."""
    if capability == roles.SIGN_DECISION:
        return SIGN
    return READ if method.upper() in SAFE_METHODS else WRITE


def scopes_all() -> list[str]:
    """Every scope (what tokens made before scopes existed were given)."""
    return list(SCOPES)


def scopes_default() -> list[str]:
    """A new token's scopes unless it asks for others."""
    return list(DEFAULT_SCOPES)
