"""Collected static files kept current: ``static_collect_if_stale`` runs ``collectstatic`` when
STATIC_ROOT has no manifest or a source file (ours, plotly's, an app's) is newer than it. The
demo, the test session and the benches call it, so a page never names a hashed file that was
not collected; a deployment runs ``manage.py collectstatic`` itself (the Dockerfile does)."""

from __future__ import annotations

import fcntl
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles.finders import BaseFinder, get_finders
from django.core.management import call_command

MANIFEST = "staticfiles.json"


class CollectedFinder(BaseFinder):
    """Finds a collected, content-hashed name in STATIC_ROOT (``js/console.0cfc3da5fbd1.js``).

    Only for servers that serve static files through the finders instead of WhiteNoise: the test
    live server (pytest-django's, Django's StaticFilesHandler) and runserver without WhiteNoise.
    It lists nothing, so collectstatic never collects STATIC_ROOT into itself."""

    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        root = Path(settings.STATIC_ROOT).resolve()
        found = (root / path).resolve()
        if found.is_relative_to(root) and found.is_file():
            return [str(found)] if find_all else str(found)
        return [] if find_all else None

    def list(self, ignore_patterns):
        return iter(())


def _newest_source_mtime() -> float:
    newest = 0.0
    for finder in get_finders():
        for _path, storage in finder.list([]):
            newest = max(newest, Path(storage.path(_path)).stat().st_mtime)
    return newest


def static_is_stale() -> bool:
    manifest = Path(settings.STATIC_ROOT) / MANIFEST
    return not manifest.exists() or manifest.stat().st_mtime < _newest_source_mtime()


def static_collect_if_stale() -> bool:
    """Collect when stale; True when it collected. Processes sharing STATIC_ROOT take turns."""
    root = Path(settings.STATIC_ROOT)
    root.mkdir(parents=True, exist_ok=True)
    with (root.parent / ".staticfiles.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not static_is_stale():
            return False
        call_command("collectstatic", interactive=False, verbosity=0)
        return True
