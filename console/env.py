"""Read settings from the environment, failing loudly with the variable's name.

Every setting specreview has is read here, once, through these helpers, so a typo in
a deployment stops start-up with a message that names the variable instead of
surfacing later as a strange runtime error.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse


class SettingsError(Exception):
    pass


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def envstr(name: str, default: str | None = None) -> str | None:
    return _raw(name) or default


def envbool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name}={value!r} is not a boolean: use true/false, yes/no, on/off or 1/0")


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise SettingsError(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise SettingsError(f"{name}={number} must be at least {minimum}")
    return number


def envlist(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def envsecret(name: str, default: str | None = None) -> str | None:
    """A secret from NAME, or from the file named by NAME_FILE (Docker/Kubernetes secrets)."""
    value = _raw(name)
    path = _raw(f"{name}_FILE")
    if value and path:
        raise SettingsError(f"set {name} or {name}_FILE, not both")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise SettingsError(f"{name}_FILE={path!r} cannot be read: {exc.strerror}") from None
    return value or default


def envdatabase(name: str, default_sqlite: Path) -> dict:
    """DATABASE_URL as a Django DATABASES['default'] entry; a SQLite file when unset."""
    import dj_database_url

    value = _raw(name)
    if value is None:
        default_sqlite.parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(default_sqlite),
            "OPTIONS": {"timeout": 30},
        }
    parsed = urlparse(value)
    if parsed.scheme not in {"postgres", "postgresql", "pgsql", "sqlite"}:
        raise SettingsError(
            f"{name}={value!r} is not a database URL specreview supports: "
            "use postgres://USER@HOST:PORT/NAME (or sqlite:///PATH)"
        )
    if parsed.scheme != "sqlite" and not parsed.path.strip("/"):
        raise SettingsError(f"{name}={value!r} names no database: add /DBNAME at the end")
    try:
        config = dj_database_url.parse(value, conn_max_age=60)
    except ValueError as exc:
        raise SettingsError(f"{name}={value!r} cannot be parsed: {exc}") from None
    return dict(config)


def envbroker(name: str, default_dir: Path) -> tuple[str, dict]:
    """The Celery broker URL and transport options; kombu's filesystem transport when unset."""
    value = _raw(name)
    if value is None:
        queue_dir = default_dir / "broker"
        for sub in ("in", "processed", "control"):
            (queue_dir / sub).mkdir(parents=True, exist_ok=True)
        options = {
            "data_folder_in": str(queue_dir / "in"),
            "data_folder_out": str(queue_dir / "in"),
            "processed_folder": str(queue_dir / "processed"),
            "control_folder": str(queue_dir / "control"),  # kombu's default is ./control in the cwd
            "store_processed": False,
        }
        return "filesystem://", options
    parsed = urlparse(value)
    if parsed.scheme not in {"redis", "rediss", "amqp", "pyamqp", "filesystem"}:
        raise SettingsError(f"{name}={value!r} is not a broker URL: use redis://HOST:PORT/DB")
    return value, {}


def secret_key_local(var_dir: Path) -> str:
    """A random key kept in var/secret_key (0600), for machines where SECRET_KEY is not set.

    Generated once and reused so sessions survive restarts; a deployment sets SECRET_KEY
    or SECRET_KEY_FILE instead.
    """
    import secrets

    path = var_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    var_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key)
    return key
