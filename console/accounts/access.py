"""Server-side permission checks for page views (the API uses console.api.api_endpoint)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.core.exceptions import PermissionDenied


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
