"""Permissions from team memberships: ``user.has_perm(perm)`` is true when the user holds ``perm``
in at least one of their teams (what a page needs to offer a button or a form), and
``user.has_perm(perm, obj)`` when they hold it in the team that owns ``obj``. Acting on an object
goes through ``console.accounts.teams`` (``visible_get`` then ``require``), which asks the same
memberships."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import BaseBackend

from console.accounts import teams


class TeamRoleBackend(BaseBackend):
    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        ms = teams.memberships(user_obj)
        if obj is not None:
            team_id = teams.team_id_of(obj)
            m = ms.get(team_id) if team_id is not None else None
            return teams.membership_permissions(m) if m is not None else set()
        perms: set[str] = set()
        for m in ms.values():
            perms |= teams.membership_permissions(m)
        return perms

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        return perm in self.get_all_permissions(user_obj, obj)
