"""Deployment checks (``manage.py check --deploy``) for what the accounts app relies on."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Tags, Warning, register


@register(Tags.security, deploy=True)
def login_throttle_cache_shared(app_configs, **kwargs):
    """Failed-login counters live in the cache: per-process memory lets each web worker count alone."""
    backend = settings.CACHES["default"]["BACKEND"]
    if backend.endswith("LocMemCache") or backend.endswith("DummyCache"):
        return [
            Warning(
                "the cache is per-process memory, so login throttling counts failures per web process",
                hint="set CACHE_URL=redis://HOST:6379/DB (docs/deploy.md)",
                id="specreview.W001",
            )
        ]
    return []
