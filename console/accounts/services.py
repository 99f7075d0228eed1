from __future__ import annotations

import secrets
import socket

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction

from console.accounts.models import ApiToken, WorkerHeartbeat
from console.accounts.roles import ROLE_PERMISSIONS, ROLES


def roles_ensure() -> None:
    """Create the role groups and give each exactly its permissions (idempotent)."""
    for role, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        wanted = []
        for dotted in perms:
            app_label, codename = dotted.split(".")
            wanted.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        group.permissions.set(wanted)


@transaction.atomic
def user_create(*, username: str, password: str, role: str, email: str = ""):
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    roles_ensure()
    User = get_user_model()
    user, created = User.objects.get_or_create(username=username, defaults={"email": email})
    user.set_password(password)
    user.save()
    user.groups.set([Group.objects.get(name=role)])
    return user


def user_role(user) -> str | None:
    if not user.is_authenticated:
        return None
    names = set(user.groups.values_list("name", flat=True))
    for role in ROLES:  # most powerful first is not needed: a user has one role
        if role in names:
            return role
    return "admin" if user.is_superuser else None


def api_token_create(*, user, name: str = "default") -> str:
    """Create a token and return its key; only its digest is stored, so show it once."""
    key = secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, name=name, key_sha256=ApiToken.digest(key))
    return key


def heartbeat_record(*, note: str) -> WorkerHeartbeat:
    return WorkerHeartbeat.objects.create(note=note, hostname=socket.gethostname())
