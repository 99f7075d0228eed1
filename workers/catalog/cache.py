"""The local model cache: where it is, what a converted folder's marker says, and its locks.

``$SPECREVIEW_MODEL_CACHE`` (default ``~/.cache/specreview/models``), shared by every checkout;
a converted folder is used only when its marker names the catalog's exact GGUF and this cache
format.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .entries import CatalogModel

MARKER = "specreview-model.json"
# Bump when the converted folder's layout changes, so stale caches are rebuilt.
CACHE_FORMAT = 1


def model_cache_dir() -> Path:
    """The local model cache folder (``$SPECREVIEW_MODEL_CACHE`` or ``~/.cache/specreview/models``)."""
    raw = os.environ.get("SPECREVIEW_MODEL_CACHE")
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "specreview" / "models"


def cached_folder(entry: CatalogModel) -> Path | None:
    """The converted folder if it is complete and was made from the catalog's exact GGUF."""
    folder = model_cache_dir() / entry.name
    marker = marker_read(folder)
    if marker and marker.get("source_sha256") == entry.sha256 and marker.get("format") == CACHE_FORMAT:
        return folder
    return None


def marker_read(folder: Path) -> dict[str, Any] | None:
    """The marker a conversion wrote in ``folder``; None when there is none (or it is damaged)."""
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None


def model_marker(folder: Path) -> dict[str, Any]:
    """What the cache recorded about a converted folder (source sha256, timings); {} if none."""
    return marker_read(folder) or {}


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """Hold ``<cache>/<name>.lock`` exclusively, so two processes never convert one model at once."""
    cache = model_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def is_hf_folder(path: Path) -> bool:
    """Whether ``path`` is a Hugging Face model folder (it has a config.json)."""
    return path.is_dir() and (path / "config.json").is_file()


def gguf_cache_folder(path: Path) -> Path:
    """Where a GGUF file outside the catalog is converted to."""
    # Keyed by path, size and mtime so a lookup never rehashes a gigabyte; the content sha256
    # is recorded in the marker.
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return model_cache_dir() / f"gguf-{key}"
