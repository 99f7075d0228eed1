"""Server-side permission checks for page views (the API declares its own: console.apikit.access)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.core.exceptions import PermissionDenied

from console.accounts import roles, teams


def capability_required(perm: str) -> Callable:
    """403 unless the user has ``perm`` in at least one of their teams, checked before the view looks
    anything up; the view then checks the object's own team (``teams.visible_get``, ``teams.require``).

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


def acts_for_anyone(user, *, team_id: int | None) -> bool:
    """An approver of the owning team may operate on objects other members created."""
    return teams.can(user, roles.SIGN_DECISION, team_id=team_id)


def owner_or_approver_required(*, user, owner_id: int | None, what: str, team_id: int | None) -> None:
    """PermissionDenied unless ``user`` created the object (``owner_id``) or is an approver of the
    team that owns it (``team_id``). Call it on an object the user can see (``teams.visible_get``).

    ``what`` names the act and the object, for the message ("cancel experiment #3"). Objects
    with no recorded creator (made by a command) are an approver's only.
    """
    if owner_id is not None and owner_id == user.pk:
        return
    if acts_for_anyone(user, team_id=team_id):
        return
    raise PermissionDenied(f"only its creator or an approver of its team may {what}")


def act_required(*, user, capability: str, team_id: int | None, what: str, owner_id: int | None = -1) -> None:
    """PermissionDenied unless ``user`` holds ``capability`` in the owning team and, when the act
    has an owner rule (``owner_id`` given, None for "made by a command"), created the object or is
    an approver of that team. Call it on an object the user can see (``teams.visible_get``)."""
    teams.require(user, capability, team_id=team_id, what=what)
    if owner_id != -1:
        owner_or_approver_required(user=user, owner_id=owner_id, what=what, team_id=team_id)


RAW_TEXT_HIDDEN = "[raw text hidden: your role cannot read prompts and outputs]"


def raw_text_allowed(*, user, team_id: int | None) -> bool:
    """Whether ``user`` may read the raw text of team ``team_id``: prompts, chat messages, tool
    definitions and outputs, retrieved payloads and references (request metadata) and model outputs.

    Every page, plot, export and API response that carries such text asks here (the rule itself:
    ``teams.raw_text_allowed``, from the membership) and, when it is False, shows
    :data:`RAW_TEXT_HIDDEN` in its place while keeping counts, flags, hashes and positions.
    """
    return teams.raw_text_allowed(user, team_id=team_id)


def raw_text_shown(value, *, allowed: bool):
    """``value`` itself when ``allowed``; else the placeholder, or None/empty kept as they are
    (an absent text says so instead of claiming one is hidden)."""
    if allowed or value is None or value == "" or value == [] or value == {}:
        return value
    return RAW_TEXT_HIDDEN
