"""Server-side permission checks for page views (the API declares its own: console.apikit.access)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.core.exceptions import PermissionDenied

from console.accounts import roles


def capability_required(perm: str) -> Callable:
    """403 unless the user has ``perm``, checked before the view looks anything up.

    The permission is recorded on the view (``required_capability``) so the role tests can
    find every guarded URL without a hand-kept list.
    """

    def decorate(view: Callable) -> Callable:
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            if not request.user.has_perm(perm):
                raise PermissionDenied(f"needs permission {perm}")
            return view(request, *args, **kwargs)

        wrapper.required_capability = perm  # type: ignore[attr-defined]
        return wrapper

    return decorate


def acts_for_anyone(user) -> bool:
    """An approver (or a superuser) may operate on objects other people created."""
    return bool(user.has_perm(roles.SIGN_DECISION))


def owner_or_approver_required(*, user, owner_id: int | None, what: str) -> None:
    """PermissionDenied unless ``user`` created the object (``owner_id``) or is an approver.

    ``what`` names the act and the object, for the message ("cancel experiment #3"). Objects
    with no recorded creator (made by a command) are an approver's only.
    """
    if owner_id is not None and owner_id == user.pk:
        return
    if acts_for_anyone(user):
        return
    raise PermissionDenied(f"only its creator or an approver may {what}")


RAW_TEXT_HIDDEN = "[raw text hidden: your role cannot read prompts and outputs]"


def raw_text_allowed(*, user) -> bool:
    """Whether ``user`` may read raw text: prompts, chat messages, tool definitions and outputs,
    retrieved payloads and references (request metadata) and model outputs.

    The one place the rule lives (a role capability today, a team membership later): every page,
    plot, export and API response that carries such text asks here and, when it is False, shows
    :data:`RAW_TEXT_HIDDEN` in its place while keeping counts, flags, hashes and positions.
    """
    return bool(user is not None and user.is_authenticated and user.has_perm(roles.READ_RAW_TEXT))


def raw_text_shown(value, *, allowed: bool):
    """``value`` itself when ``allowed``; else the placeholder, or None/empty kept as they are
    (an absent text says so instead of claiming one is hidden)."""
    if allowed or value is None or value == "" or value == [] or value == {}:
        return value
    return RAW_TEXT_HIDDEN
