"""Which configs the openai engine accepts, checked before any run starts (nothing is contacted).

A config reaches only a server the operator registered (``workers.engines.servers``), by name or
by its exact base URL, and its key comes with that registration: a config naming a key, a key
variable, another credential, or a metrics page on another host is refused with a message that
names the field (``engine_args.KEY``).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from .base import EngineConfig, EngineError
from .servers import openai_server_for

ENGINE_ARGS = {
    "server",
    "base_url",
    "credential",
    "endpoint",
    "timeout_s",
    "connect_timeout_s",
    "metrics_url",
    "max_connections",
    "return_token_ids",
    "continuous_usage_stats",
    "extra_body",
    "check_server",
    "transport",
}

# Keys a config may not carry: the key comes with the server's registration.
REFUSED_ARGS = {
    "api_key": "a literal key is never stored in a config",
    "api_key_env": "a config cannot choose which worker environment variable to send",
}


def openai_config_validate(*, config: EngineConfig) -> dict[str, str]:
    """Refuse a config the openai engine cannot use, before any run starts; return the
    registered server it names (``{"url", "credential"}``).

    Only servers the operator registered are reachable, and their key comes with the
    registration. The speculative config is informational (the server runs what it was
    started with): it must be an object of vLLM keys, and is recorded as given.
    """
    args = config.engine_args
    if not isinstance(args, dict):
        raise EngineError("engine_args must be an object")
    for key, why in REFUSED_ARGS.items():
        if key in args:
            raise EngineError(
                f"engine_args.{key} is not accepted: {why}. Name a registered server with "
                '"server" and its key comes with it (an operator registers servers and credentials '
                "in SPECREVIEW_OPENAI_SERVERS / SPECREVIEW_OPENAI_CREDENTIALS, see docs/engines.md)"
            )
    unknown = set(args) - ENGINE_ARGS
    if unknown:
        raise EngineError(
            f"engine_args {sorted(unknown)} are not understood by the openai engine; known: "
            f"{sorted(ENGINE_ARGS)}"
        )
    if "server" not in args:
        base_url = args.get("base_url")
        if not isinstance(base_url, str) or not re.match(r"^https?://", base_url):
            raise EngineError(
                'engine_args needs "server" (a registered server\'s name) or "base_url" (its '
                "http(s) URL, e.g. http://127.0.0.1:8000/v1)"
            )
    name, server = openai_server_for(server=args.get("server"), base_url=args.get("base_url"))
    credential = args.get("credential")
    if credential is not None and credential != server["credential"]:
        given = server["credential"] or "none"
        raise EngineError(
            f"engine_args.credential {credential!r} is not the credential of server {name!r} ({given}): "
            "a server's key comes with its registration; leave credential out"
        )
    metrics_url = args.get("metrics_url")
    if metrics_url not in (None, "") and _origin(str(metrics_url)) != _origin(server["url"]):
        raise EngineError(
            f"engine_args.metrics_url must be on the server's own scheme, host and port "
            f'({_origin(server["url"])}), or "" to skip scraping'
        )
    if args.get("endpoint") not in (None, "chat", "completions"):
        raise EngineError(f"engine_args.endpoint must be 'chat' or 'completions', got {args['endpoint']!r}")
    if not config.target_model:
        raise EngineError("target_model must be the model name the server serves")
    if args.get("extra_body") is not None and not isinstance(args["extra_body"], dict):
        raise EngineError("engine_args.extra_body must be an object")
    _speculative_check(config.speculative_config)
    return server


def _speculative_check(spec: object) -> None:
    """The server runs the speculative config it was started with; one given here is recorded
    as given, so it only has to be an object of vLLM's keys."""
    if spec is None:
        return
    if not isinstance(spec, dict):
        raise EngineError(f"speculative_config must be an object, got {type(spec).__name__}")
    if not all(isinstance(k, str) for k in spec):
        raise EngineError("speculative_config keys must be strings (vLLM's own keys)")
    if "method" in spec and not isinstance(spec["method"], str):
        raise EngineError(f"speculative_config.method must be a string, got {spec['method']!r}")
    k = spec.get("num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise EngineError(f"speculative_config.num_speculative_tokens must be an integer >= 1, got {k!r}")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "(not a URL)"
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"
