"""What an operator lets the openai engine reach: registered servers and named credentials.

Both are plain data that the process's entry point registers at start-up with
:func:`openai_access_register`: under Django the ``workers`` app does (``workers/apps.py``), from
the settings ``SPECREVIEW_OPENAI_SERVERS`` and ``SPECREVIEW_OPENAI_CREDENTIALS`` (parsed by
``console.env``); a bench script registers its own. Until one is registered, no server is
reachable. A config names a server (or gives a ``base_url`` equal to a registered one); the key
comes with the server's registration and is read here, on the worker, when a request is sent:
never stored in a config, a page or a bundle.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .base import EngineError


@dataclass(frozen=True)
class OpenAIAccess:
    """The servers and credentials an operator registered, as plain data.

    ``servers``: ``{name: {"url": base URL without trailing slash, "credential": name or ""}}``,
    optionally with ``"kind"`` (one of :data:`SERVER_KINDS`: what the server understands beyond
    plain OpenAI; absent = detected at start);
    ``credentials``: ``{name: {"env": VARIABLE} | {"file": absolute path}}`` (where each key
    lives, never the key itself).
    """

    servers: dict[str, dict[str, str]] = field(default_factory=dict)
    credentials: dict[str, dict[str, str]] = field(default_factory=dict)


# ``vllm``: vLLM's extensions are sent (token ids, continuous usage stats); ``openai``: plain
# OpenAI only, nothing detected.
SERVER_KINDS = ("vllm", "openai")

AccessSource = Callable[[], OpenAIAccess]
_source: AccessSource = OpenAIAccess


def openai_access_register(source: AccessSource) -> None:
    """Say where the registry comes from: ``source()`` is asked each time a server or key is
    looked up, so settings changed at run time (a test's override) are seen at once."""
    global _source
    _source = source


def openai_servers() -> dict[str, dict[str, str]]:
    """``{name: {"url": base URL without trailing slash, "credential": name or ""}}``."""
    return _source().servers


def openai_server_for(*, server: str | None, base_url: str | None) -> tuple[str, dict[str, str]]:
    """The registered server a config means, by name or by its exact base URL.

    Raises EngineError saying which servers are registered.
    """
    servers = openai_servers()
    known = ", ".join(sorted(servers)) or "none: an operator registers them in SPECREVIEW_OPENAI_SERVERS"
    if server is not None:
        if not isinstance(server, str) or server not in servers:
            raise EngineError(
                f"engine_args.server {server!r} is not a registered server; registered: {known}"
            )
        entry = servers[server]
        if base_url is not None and str(base_url).rstrip("/") != entry["url"]:
            raise EngineError(
                f"engine_args.base_url {base_url!r} is not the URL of server {server!r}; give the server only"
            )
        return server, entry
    if isinstance(base_url, str):
        wanted = base_url.rstrip("/")
        matches = [(name, entry) for name, entry in servers.items() if entry["url"] == wanted]
        if len(matches) > 1:
            names = ", ".join(name for name, _ in matches)
            raise EngineError(
                f'engine_args.base_url {base_url!r} is registered as {names}: name one with "server"'
            )
        if matches:
            return matches[0]
    raise EngineError(
        f"engine_args.base_url {base_url!r} is not a registered server: name one with "
        f'"server" (registered: {known}); an operator adds servers to SPECREVIEW_OPENAI_SERVERS'
    )


def credential_value(*, name: str) -> str:
    """The key a named credential holds, read now (environment variable or file).

    Raises EngineError naming the credential and where it should be, never a value.
    """
    source = _source().credentials.get(name)
    if source is None:
        raise EngineError(
            f"credential {name!r} is not configured on this worker (SPECREVIEW_OPENAI_CREDENTIALS)"
        )
    if "file" in source:
        try:
            value = Path(source["file"]).read_text().strip()
        except OSError as exc:
            raise EngineError(f"credential {name!r}: its file cannot be read ({exc.strerror})") from None
    else:
        value = os.environ.get(source["env"], "").strip()
    if not value:
        raise EngineError(f"credential {name!r} is empty on this worker: its operator must set it")
    return value


def credential_values() -> list[str]:
    """Every configured credential's value that can be read here (for scrubbing text)."""
    out = []
    for name in _source().credentials:
        try:
            out.append(credential_value(name=name))
        except EngineError:
            continue
    return out
