"""Loading for the ``hf`` engine: the device and its threads, a model and its tokenizer.

Models come from local folders only (``local_files_only``): a catalog name, a Hugging Face folder
or a GGUF file, resolved by ``workers.catalog``. transformers is imported when a model is loaded,
never when a config is checked.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from workers.catalog.resolve import model_resolve

from .base import EngineError


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity), else every CPU the host has."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def device_prepare(args: dict[str, Any]) -> str:
    """The device a config runs on (``cpu`` or ``cuda``), checked; on the CPU torch gets
    ``num_threads`` threads (default: every CPU this process may use)."""
    import torch

    device = args.get("device", "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise EngineError("engine_args.device is 'cuda' but no CUDA device is visible")
    if device == "cpu":
        torch.set_num_threads(args.get("num_threads") or available_cpus())
    return device


def model_load(*, folder: Path, name: str, dtype: Any, device: str) -> Any:
    """The model in ``folder`` in ``dtype`` (a torch dtype) on ``device``, in eval mode."""
    from transformers import AutoModelForCausalLM

    try:
        model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise EngineError(f"could not load model {name!r} from {folder}: {exc}") from exc
    return model.to(device).eval()


def model_with_tokenizer_load(*, name: str, dtype: Any, device: str) -> tuple[Any, Any, Path]:
    """(model, tokenizer, folder) for a catalog name, folder or GGUF path."""
    from transformers import AutoTokenizer

    folder = model_resolve(name_or_path=name)
    try:
        tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise EngineError(f"could not load model {name!r} from {folder}: {exc}") from exc
    return model_load(folder=folder, name=name, dtype=dtype, device=device), tok, folder


def eos_ids(*, model: Any, tokenizer: Any) -> set[int]:
    """The token ids that end generation: the model's generation config's and the tokenizer's."""
    ids: set[int] = set()
    for value in (model.generation_config.eos_token_id, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    return ids
