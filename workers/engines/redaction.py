"""Keep keys out of what users see: scrub error text, redact secret-looking config entries.

``text_scrub`` runs on every error a server or engine reports before it is stored
(``Run.error``, per-request errors): viewers read those. ``config_redact`` runs on stored
configs before a page, an export or a decision bundle shows them, so a row written before
configs were validated shows ``[redacted]`` instead of its key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .servers import credential_values

REDACTED = "[redacted]"
ERROR_LIMIT_BYTES = 2048

_PATTERNS = (
    # Authorization headers and bearer tokens, echoed back by a server.
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]+"), rf"\1 {REDACTED}"),
    # OpenAI-style and Hugging Face keys.
    (re.compile(r"\b(sk|hf|pk|rk)[-_][A-Za-z0-9_\-]{6,}"), REDACTED),
    # key=value / "key": "value" where the key says it is a secret.
    (
        re.compile(
            r"""(?i)(["']?\b[\w\-]*(?:api[_\-]?key|secret|password|passwd|token|authorization)["']?"""
            r"""\s*[:=]\s*["']?)([^\s"',;&}]+)"""
        ),
        rf"\1{REDACTED}",
    ),
    # user:password@ in URLs.
    (re.compile(r"(?i)(\w+://[^/\s:@]+:)[^/\s@]+@"), rf"\1{REDACTED}@"),
)

# Config keys whose values are secrets (compared with ``-`` as ``_``, case-insensitive).
_SECRET_KEYS = {
    "api_key",
    "apikey",
    "key",
    "secret",
    "password",
    "passwd",
    "token",
    "authorization",
    "bearer",
}
_SECRET_SUFFIXES = ("_api_key", "_apikey", "_secret", "_password", "_token", "_authorization")


def text_scrub(text: str, *, secrets: Iterable[str] | None = None, limit: int = ERROR_LIMIT_BYTES) -> str:
    """``text`` without credentials, cut to ``limit`` bytes (UTF-8) with a note of what was cut.

    ``secrets`` are literal values to remove (default: every credential configured on this
    host); patterns catch bearer tokens, ``sk-...`` keys and ``api_key=...`` pairs.
    """
    if secrets is None:
        secrets = credential_values()
    for value in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    kept = raw[:limit].decode("utf-8", "ignore")
    return f"{kept}... [{len(raw) - len(kept.encode('utf-8'))} more bytes cut]"


def key_is_secret(key: str, *, in_config: bool = True) -> bool:
    """Whether a config key names a secret. Outside a config (a checklist item's ``key``, a
    gate criterion's) the bare words ``key`` and ``token`` mean something else."""
    normal = str(key).lower().replace("-", "_")
    if normal in {"key", "token"} and not in_config:
        return False
    return normal in _SECRET_KEYS or normal.endswith(_SECRET_SUFFIXES) or normal == "api_key_env"


def config_redact(value: Any) -> Any:
    """A copy of a stored config (any JSON) with secret-looking entries replaced by ``[redacted]``."""
    if isinstance(value, dict):
        return {k: REDACTED if key_is_secret(k) else config_redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [config_redact(v) for v in value]
    if isinstance(value, str):
        return text_scrub(value, secrets=(), limit=1 << 30)
    return value


# In free text (a rationale, a checklist note) only what is unmistakably a key is touched.
_DOCUMENT_PATTERNS = (
    (re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=\-]{8,}"), f"Bearer {REDACTED}"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), REDACTED),
    (re.compile(r"""(?i)(["']?\bapi[_\-]?key["']?\s*[:=]\s*["']?)([^\s"',;&}]+)"""), rf"\1{REDACTED}"),
)
CONFIG_KEYS = ("engine_args", "speculative_config")


def document_redact(value: Any) -> Any:
    """A copy of a page's or an export's data (any JSON) without keys: configs inside it
    (``engine_args``, ``speculative_config``) through :func:`config_redact`, secret-named
    entries as ``[redacted]``, and key-shaped text in strings (``sk-...``, ``api_key=...``)."""
    if isinstance(value, dict):
        return {
            k: REDACTED
            if key_is_secret(k, in_config=False)
            else config_redact(v)
            if k in CONFIG_KEYS
            else document_redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [document_redact(v) for v in value]
    if isinstance(value, str):
        for pattern, replacement in _DOCUMENT_PATTERNS:
            value = pattern.sub(replacement, value)
    return value
