"""A GGUF file to a safetensors folder (model + tokenizer), once, fully offline.

transformers loads the GGUF, dequantizes it to float32 (exact; an engine may cast at load time)
and saves a folder next to which a marker records the source's sha256, the converter's versions
and the timings (seconds). The folder appears under its final name only when it is complete.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from .cache import CACHE_FORMAT, MARKER


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
    # seam: the gguf reader (and numpy) load only when a GGUF is converted
    from gguf import GGUFReader

    field = GGUFReader(gguf).fields.get("tokenizer.ggml.add_bos_token")
    if field is None:
        return None
    return bool(field.parts[field.data[0]][0])
