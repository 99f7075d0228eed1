"""Read settings from the environment, failing loudly with the variable's name.

Every setting specreview has is read here, once, through these helpers, so a typo in
a deployment stops start-up with a message that names the variable instead of
surfacing later as a strange runtime error.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlsplit

from workers.engines.server_telemetry import telemetry_spec_check


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


def envint(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise SettingsError(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise SettingsError(f"{name}={number} must be at least {minimum}")
    if maximum is not None and number > maximum:
        raise SettingsError(f"{name}={number} must be at most {maximum}")
    return number


def envint_optional(name: str, *, minimum: int | None = None) -> int | None:
    """An integer, or None when the variable is unset or empty (e.g. "keep for ever")."""
    if _raw(name) is None:
        return None
    return envint(name, 0, minimum=minimum)


def envlist(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def envurls(name: str) -> list[str]:
    """A comma-separated list of http(s) URLs; empty when unset. Anything else stops start-up."""
    urls = envlist(name, [])
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SettingsError(f"{name}: {url[:200]!r} is not an http(s) URL with a host")
    return urls


def envnetworks(name: str) -> list[str]:
    """A comma-separated list of IP addresses or CIDR networks (``10.0.0.0/8,192.0.2.1,::1``), each
    written back in its normal form; empty when unset. A value that is neither stops start-up."""
    out = []
    for item in envlist(name, []):
        try:
            out.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise SettingsError(
                f"{name}: {item!r} is not an IP address or network (use e.g. 10.0.0.5 or 10.0.0.0/8)"
            ) from None
    return out


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


# Writers wait up to 30 s for the lock, and every transaction takes the write lock when it
# begins (BEGIN IMMEDIATE): a read-then-write transaction (signing) can then never be refused
# half-way with "database is locked", it waits its turn and sees the winner's commit.
SQLITE_OPTIONS = {"timeout": 30, "transaction_mode": "IMMEDIATE"}


def envdatabase(name: str, default_sqlite: Path) -> dict:
    """DATABASE_URL as a Django DATABASES['default'] entry; a SQLite file when unset."""
    import dj_database_url

    value = _raw(name)
    if value is None:
        default_sqlite.parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(default_sqlite),
            "OPTIONS": dict(SQLITE_OPTIONS),
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
    if parsed.scheme == "sqlite":
        config["OPTIONS"] = {**SQLITE_OPTIONS, **(config.get("OPTIONS") or {})}
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


_NAME = r"[A-Za-z0-9][A-Za-z0-9_.\-]*"
_ENV_VAR = r"[A-Za-z_][A-Za-z0-9_]*"


def envcredentials(name: str) -> dict[str, dict[str, str]]:
    """Named credentials the operator configured: ``name=ENV_VAR`` or ``name=@/path/to/file``.

    Returns ``{credential_name: {"env": VAR} | {"file": path}}``: where each key lives, never
    the key itself (the worker reads it when it sends a request, so a rotated file is picked up
    and the console host needs none of them).
    """
    value = _raw(name)
    out: dict[str, dict[str, str]] = {}
    if value is None:
        return out
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        key, sep, source = (s.strip() for s in item.partition("="))
        if not sep or not re.fullmatch(_NAME, key):
            raise SettingsError(f"{name}: {item!r} is not NAME=ENV_VAR or NAME=@/path/to/file")
        if key in out:
            raise SettingsError(f"{name}: credential {key!r} is named twice")
        if source.startswith("@"):
            path = source[1:]
            if not Path(path).is_absolute():
                raise SettingsError(f"{name}: credential {key!r} file {path!r} must be an absolute path")
            out[key] = {"file": path}
        elif re.fullmatch(_ENV_VAR, source):
            out[key] = {"env": source}
        else:
            raise SettingsError(
                f"{name}: credential {key!r} must name an environment variable or @/path/to/file, "
                f"got {source!r}"
            )
    return out


def _registry(name: str, *, fields: set[str], json_hint: str, secrets_where: str) -> dict[str, dict[str, Any]]:
    """A registry of named servers an operator writes as ``NAME=URL,NAME=URL`` or as JSON
    (``{"NAME": URL or {"url": URL, ...}}``): each entry as a dict with ``fields`` at most, its
    name checked and its URL an http(s) URL with a host and no user, password, query or fragment
    (secrets go where ``secrets_where`` says), without its trailing slash. Empty when unset."""
    value = _raw(name)
    if value is None:
        return {}
    data: Any
    if not value.startswith(("{", "[")):
        data = {}
        for item in (part.strip() for part in value.split(",")):
            key, sep, target = (s.strip() for s in item.partition("="))
            if item and not sep:
                raise SettingsError(f"{name}: {item!r} is not NAME=URL (or use the JSON form)")
            if item and key in data:
                raise SettingsError(f"{name}: server {key!r} is named twice")
            if item:
                data[key] = target
    else:
        try:
            data = json.loads(value)
        except ValueError as exc:
            raise SettingsError(f"{name} is not JSON ({exc}): use {json_hint}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{name} must be a JSON object of server names, got {type(data).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for key, entry in data.items():
        if not re.fullmatch(_NAME, key):
            raise SettingsError(f"{name}: {key!r} is not a server name (letters, digits, _ . -)")
        if isinstance(entry, str):
            entry = {"url": entry}
        if not isinstance(entry, dict) or set(entry) - fields:
            raise SettingsError(f"{name}: server {key!r} must be a URL or {json_hint}")
        url: Any = entry.get("url")
        parsed = urlparse(url) if isinstance(url, str) else None
        if parsed is None or parsed.scheme not in {"http", "https"} or not parsed.hostname:
            raise SettingsError(f"{name}: server {key!r} needs an http(s) URL with a host, got {url!r}")
        if parsed.username or parsed.password or parsed.query or parsed.fragment:
            raise SettingsError(
                f"{name}: server {key!r} URL must carry no user, password, query or fragment ({secrets_where})"
            )
        out[key] = entry | {"url": url.rstrip("/")}
    return out


# What a registered server understands beyond plain OpenAI (workers.engines.servers.SERVER_KINDS).
OPENAI_SERVER_KINDS = ("vllm", "openai")


def envopenai_servers(name: str, *, credentials: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The OpenAI-compatible servers an operator lets experiments reach.

    JSON: ``{"prod-vllm": {"url": "https://vllm.internal:8000/v1", "credential": "prod-key"},
    "local": "http://127.0.0.1:8000/v1"}`` (a bare string is a server without a key), or the
    short form ``local=http://127.0.0.1:8000/v1,other=...`` for servers without keys. Returns
    ``{server_name: {"url": url, "credential": name or ""}}``; a credential must be one of
    ``credentials`` (SPECREVIEW_OPENAI_CREDENTIALS). An optional ``"kind"`` (``vllm`` |
    ``openai``) says what the server understands; without it the engine detects it at start.
    An optional ``"telemetry"`` says where the server's memory, utilisation and power are read
    (``workers.engines.server_telemetry``); without it they are not measured.
    """
    entries = _registry(
        name,
        fields={"url", "credential", "kind", "telemetry"},
        json_hint='{"NAME": "http://host:port/v1"} or {"NAME": {"url": "...", "credential": "CREDENTIAL"}}',
        secrets_where="keys go in SPECREVIEW_OPENAI_CREDENTIALS",
    )
    out: dict[str, dict[str, str]] = {}
    for key, entry in entries.items():
        credential = entry.get("credential") or ""
        if not isinstance(credential, str) or (credential and credential not in credentials):
            raise SettingsError(
                f"{name}: server {key!r} names credential {credential!r}, which "
                f"SPECREVIEW_OPENAI_CREDENTIALS does not define"
            )
        out[key] = {"url": entry["url"], "credential": credential}
        if entry.get("kind") is not None:
            if entry["kind"] not in OPENAI_SERVER_KINDS:
                raise SettingsError(
                    f"{name}: server {key!r} kind must be one of {list(OPENAI_SERVER_KINDS)}, "
                    f"got {entry['kind']!r}"
                )
            out[key]["kind"] = entry["kind"]
        if entry.get("telemetry") is not None:
            try:
                spec = telemetry_spec_check(entry["telemetry"], where=f"{name}: server {key!r}")
            except ValueError as exc:
                raise SettingsError(str(exc)) from None
            # kept as canonical JSON text: the registry's entries are plain strings
            out[key]["telemetry"] = json.dumps(spec, sort_keys=True)
    return out


def envprometheus(name: str) -> dict[str, dict[str, str]]:
    """The Prometheus servers an operator registers for guarded rollouts' rollback triggers.

    Short form ``main=http://prometheus:9090,other=...``, or JSON: ``{"main": "http://host:9090"}``
    or ``{"main": {"url": "https://host:9090", "bearer_token_file": "/run/secrets/prom"}}``.
    Returns ``{server_name: {"url": url, "bearer_token_file": path or ""}}``: where a token lives,
    never the token (the caller reads the file when it queries, so a rotated token is picked up).
    """
    entries = _registry(
        name,
        fields={"url", "bearer_token_file"},
        json_hint='{"NAME": "http://host:9090"} or {"NAME": {"url": "...", "bearer_token_file": "/path"}}',
        secrets_where="a token goes in bearer_token_file",
    )
    out: dict[str, dict[str, str]] = {}
    for key, entry in entries.items():
        token_file = entry.get("bearer_token_file") or ""
        if not isinstance(token_file, str) or (token_file and not Path(token_file).is_absolute()):
            raise SettingsError(
                f"{name}: server {key!r} bearer_token_file must be an absolute path, got {token_file!r}"
            )
        out[key] = {"url": entry["url"], "bearer_token_file": token_file}
    return out


ENVIRONMENTS = ("development", "production")


def envchoice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = _raw(name)
    if value is None:
        return default
    if value not in choices:
        raise SettingsError(f"{name}={value!r} is not one of: {', '.join(choices)}")
    return value


def secret_key_strong(name: str, value: str | None) -> str:
    """Production's SECRET_KEY: set, long and random-looking, or start-up stops naming NAME.

    The thresholds are Django's own (``check --deploy``, security.W009): at least 50 characters,
    at least 5 distinct ones, and not a ``django-insecure-`` placeholder.
    """
    if value is None:
        raise SettingsError(
            f"SPECREVIEW_ENV=production needs {name} (or {name}_FILE): a random string of 50+ characters, "
            "e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
    if len(value) < 50 or len(set(value)) < 5 or value.startswith("django-insecure-") or "change-me" in value:
        raise SettingsError(
            f"{name} is too weak for SPECREVIEW_ENV=production ({len(value)} characters, "
            f"{len(set(value))} distinct): use 50+ random characters"
        )
    return value


def envcache(name: str) -> dict:
    """CACHE_URL (redis://HOST:6379/DB) as Django's CACHES['default']; local memory when unset.

    The cache holds login-throttling counters: with several web processes it must be shared
    (Redis), or each process counts failures on its own.
    """
    value = _raw(name)
    if value is None:
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "specreview"}
    parsed = urlparse(value)
    if parsed.scheme not in {"redis", "rediss", "unix"}:
        raise SettingsError(f"{name}={value!r} is not a cache URL: use redis://HOST:6379/DB")
    return {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": value,
        "KEY_PREFIX": "specreview",
    }
