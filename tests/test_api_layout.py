"""One place per app for API views: every JSON API operation is defined in its app's ``api.py``,
and every other console URL is served from a ``views.py`` (HTML pages and the downloads they link
to: CSV, Markdown, PDF, JSON bundles, shell scripts)."""

from __future__ import annotations

import re

from django.urls import URLPattern, URLResolver, get_resolver

import console.urls  # noqa: F401  (adds the app routers to the API)
from console.api import api

API_MODULE = re.compile(r"^console\.(accounts|traces|experiments|analysis|policies|decisions|rollouts)\.api$")
VIEWS_MODULE = re.compile(r"^console(\.(accounts|traces|experiments|analysis|policies|decisions|rollouts))?\.views$")


def _operations():
    for _prefix, router in api._routers:
        for path, path_view in router.path_operations.items():
            for op in path_view.operations:
                yield path, op.view_func


def _page_callbacks(patterns, prefix=""):
    for p in patterns:
        route = prefix + str(p.pattern)
        if isinstance(p, URLResolver):
            if route.startswith(("api/", "admin/")):
                continue
            yield from _page_callbacks(p.url_patterns, route)
        elif isinstance(p, URLPattern):
            yield route, p.callback


def test_every_api_operation_lives_in_an_apps_api_module():
    operations = list(_operations())
    assert len(operations) >= 10
    misplaced = [(path, f.__module__) for path, f in operations if not API_MODULE.match(f.__module__)]
    assert misplaced == []


def test_every_page_url_is_served_from_a_views_module():
    callbacks = [(r, c) for r, c in _page_callbacks(get_resolver().url_patterns)]
    assert len(callbacks) >= 20
    misplaced = [
        (route, callback.__module__)
        for route, callback in callbacks
        if callback.__module__.startswith("console") and not VIEWS_MODULE.match(callback.__module__)
    ]
    assert misplaced == []
