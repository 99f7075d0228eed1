"""Choose the ``hf`` engine's number format by the machine, measured.

``engine_args.dtype`` may pin ``float32``, ``bfloat16`` or ``float16`` (CUDA only); the default
``auto`` decides from two things:

* **Native support.** On a CPU, bfloat16 is native when the CPU has ``avx512_bf16`` or
  ``amx_bf16`` (x86) or ``bf16`` (Arm); without them every bf16 matrix product is emulated and
  is slower than float32 (measured on a 2-core AVX2 machine: a ~700-token prefill of the 1.5B
  target took 100-120 s in bf16). On CUDA, ``torch.cuda.is_bf16_supported()``.
* **A short measured probe** on the actual target model: prefill tokens/s and decode tokens/s per
  candidate dtype, each bounded by a time budget (a few seconds). The chosen dtype is the one
  with the lowest estimated time for a reference request (``REF_PREFILL`` prompt tokens plus
  ``REF_DECODE`` generated tokens); a reduced precision must beat float32 by ``MARGIN`` to be
  chosen (float32 keeps exact-match checks exact), and a dtype the hardware does not support
  natively is never chosen, whatever one noisy probe said.

The probe's result is cached per host and model in a JSON file (``dtype_cache_path()``), keyed
by a fingerprint of the CPU model and flags, the device, the torch version, the thread count
and the model's identity, so later runs reuse it. A cache file that cannot be read or parsed is
treated as empty (and rewritten), never a failure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import hashlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workers.catalog.cache import model_cache_dir
from workers.hardware import hardware_describe

CACHE_VERSION = 1
CANDIDATES_CPU = ("float32", "bfloat16")
REF_PREFILL = 512  # prompt tokens of the reference request the choice minimises the time of
REF_DECODE = 64  # generated tokens of the reference request
MARGIN = 1.10  # a reduced precision must be at least this much faster than float32
PROBE_BUDGET_S = 3.0  # per candidate: half for prefill, half for decode (model load not counted)
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 (AVX-512 / AMX) and Arm (FEAT_BF16)
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass
class Rates:
    """One candidate's probe: tokens/s for prefill (one forward over a prompt) and decode (one token a step)."""

    prefill_tok_s: float
    decode_tok_s: float
    prefill_tokens: int
    decode_tokens: int

    def reference_s(self) -> float:
        """Estimated seconds for the reference request (REF_PREFILL prompt + REF_DECODE output tokens)."""
        return REF_PREFILL / self.prefill_tok_s + REF_DECODE / self.decode_tok_s


@dataclass
class DtypeChoice:
    """What the engine runs in and why. ``source``: "pinned", "probe" (measured now) or "cache"."""

    dtype: str
    source: str
    reason: str
    native_bf16: bool | None = None
    native_detail: str = ""
    probe: dict[str, Rates] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    measured_at: str = ""
    probe_s: float | None = None  # seconds the probe took (loads included), when measured now

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``Run.hardware["dtype"]`` and the cache."""
        out = asdict(self)
        out["probe"] = {k: asdict(v) for k, v in self.probe.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DtypeChoice:
        """The inverse of ``as_dict``; raises ValueError/TypeError/KeyError on a malformed entry."""
        probe = {str(k): Rates(**v) for k, v in dict(data.get("probe") or {}).items()}
        for rates in probe.values():
            if not (rates.prefill_tok_s > 0 and rates.decode_tok_s > 0):
                raise ValueError("probe rates must be positive")
        choice = cls(
            dtype=str(data["dtype"]),
            source=str(data["source"]),
            reason=str(data["reason"]),
            native_bf16=data.get("native_bf16"),
            native_detail=str(data.get("native_detail", "")),
            probe=probe,
            fingerprint=dict(data.get("fingerprint") or {}),
            measured_at=str(data.get("measured_at", "")),
        )
        choice.probe_s = None  # the time a probe took belongs to the run that measured it
        if choice.dtype not in SHORT or choice.dtype not in probe:
            raise ValueError(f"cached dtype {choice.dtype!r} has no probe")
        return choice


# -- native support ------------------------------------------------------------------------------


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``) from /proc/cpuinfo text; empty if unknown."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return set(value.split())
    return set()


def cpu_bf16_native(flags: set[str]) -> tuple[bool, str]:
    """Whether a CPU with these flags runs bfloat16 natively, and a sentence saying why.

    The seam tests call with fake flag sets. An empty set (flags unknown) falls back to torch's
    own oneDNN capability query.
    """
    found = [f for f in BF16_CPU_FLAGS if f in flags]
    if found:
        return True, f"CPU has native bf16 ({', '.join(found)})"
    if flags:
        return False, "CPU lacks native bf16 (no avx512_bf16/amx_bf16/bf16 flag)"
    try:
        import torch

        native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError, ImportError):
        return False, "CPU flags unknown and torch cannot tell: bf16 assumed not native"
    return native, f"CPU flags unknown; torch's oneDNN says bf16 is {'' if native else 'not '}supported"


def candidates(*, device: str, native_bf16: bool) -> tuple[str, ...]:
    """The dtypes ``auto`` probes on a device. float32 is always first (the reference)."""
    if device == "cuda":
        return ("float32", "bfloat16") if native_bf16 else ("float32", "float16")
    return CANDIDATES_CPU


def decide(
    *, probe: dict[str, Rates], native_bf16: bool, native_detail: str, device: str = "cpu"
) -> tuple[str, str]:
    """The dtype to run in and a sentence saying why, from probe rates and native support.

    Pure: the rule in the module docstring. Returns ("float32", "float32: CPU lacks native bf16;
    probe: fp32 prefill 850 tok/s, decode 16.0 tok/s vs bf16 prefill 40 tok/s, decode 5.1 tok/s").
    """
    figures = " vs ".join(
        f"{SHORT.get(name, name)} prefill {r.prefill_tok_s:.0f} tok/s, decode {r.decode_tok_s:.1f} tok/s"
        for name, r in probe.items()
    )
    base = probe.get("float32")
    best, why = "float32", native_detail
    if base is not None:
        for name, rates in probe.items():
            if name == "float32":
                continue
            native = native_bf16 if name == "bfloat16" else device == "cuda"
            speedup = base.reference_s() / rates.reference_s()
            if not native:
                continue
            if speedup >= MARGIN and rates.reference_s() < probe[best].reference_s():
                best = name
                why = f"{native_detail}; {SHORT[name]} is {speedup:.2f}x faster on a {REF_PREFILL}+{REF_DECODE}-token request"
            elif best == "float32":
                why = (
                    f"{native_detail}, but {SHORT[name]} is only {speedup:.2f}x fp32's speed on a "
                    f"{REF_PREFILL}+{REF_DECODE}-token request (needs {MARGIN:.2f}x)"
                )
    return best, f"{best}: {why}; probe: {figures}" if figures else f"{best}: {why}"


# -- the probe -------------------------------------------------------------------------------------


def probe_rates(model: Any, *, budget_s: float = PROBE_BUDGET_S, vocab: int | None = None) -> Rates:
    """Measure one loaded model: prefill and decode tokens/s, each within about ``budget_s / 2``.

    Prefill: one forward over a prompt whose length is sized from a warm-up on 4 tokens (8 to
    256 tokens; 4 when the warm-up alone used the budget). Decode: single-token steps with the
    KV cache, until the budget or 32 tokens (at least one). On a loaded machine the minimum work
    (three short forwards) may run past the budget: the budget bounds the work, not the clock.
    Token ids are fixed and spread over the vocabulary (speed does not depend on the text).
    """
    import torch

    size = vocab or int(getattr(model.config, "vocab_size", 32000))
    device = next(model.parameters()).device

    def ids(n: int, offset: int = 0) -> Any:
        return torch.tensor([[(7919 * (i + offset) + 13) % size for i in range(n)]], device=device)

    half = max(budget_s / 2, 0.01)
    with torch.inference_mode():
        t0 = time.perf_counter()
        model(ids(4), use_cache=False)  # warm-up: allocations, kernels chosen
        warm_s = time.perf_counter() - t0
        if warm_s >= half:
            # A slow machine: the warm-up already spent the prefill budget; it is the measurement.
            n_prefill, prompt = 4, ids(4)
            t0 = time.perf_counter()
            out = model(prompt, use_cache=True)
            prefill_s = min(time.perf_counter() - t0, warm_s)
        else:
            n_prefill = int(min(256, max(8, (half - warm_s) * 4 / warm_s)))
            prompt = ids(n_prefill)
            t0 = time.perf_counter()
            out = model(prompt, use_cache=True)
            prefill_s = time.perf_counter() - t0
        past = out.past_key_values
        token = out.logits[:, -1:].argmax(-1)
        steps, decode_s = 0, 0.0
        while steps < 32 and (decode_s < half or steps < 1):
            t0 = time.perf_counter()
            out = model(token, past_key_values=past, use_cache=True)
            decode_s += time.perf_counter() - t0
            past = out.past_key_values
            token = out.logits[:, -1:].argmax(-1)
            steps += 1
    return Rates(
        prefill_tok_s=n_prefill / max(prefill_s, 1e-9),
        decode_tok_s=steps / max(decode_s, 1e-9),
        prefill_tokens=n_prefill,
        decode_tokens=steps,
    )


# -- the cache ---------------------------------------------------------------------------------------


def probe_budget_s() -> float:
    """Seconds of probing per candidate dtype: ``$SPECREVIEW_DTYPE_PROBE_S`` or ``PROBE_BUDGET_S``."""
    raw = os.environ.get("SPECREVIEW_DTYPE_PROBE_S", "").strip()
    if not raw:
        return PROBE_BUDGET_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 600:
        raise ValueError(f"SPECREVIEW_DTYPE_PROBE_S must be a number of seconds in (0, 600], got {raw!r}")
    return value


def dtype_cache_path() -> Path:
    """``$SPECREVIEW_DTYPE_CACHE``, else ``dtype-probe.json`` in the model cache folder."""
    raw = os.environ.get("SPECREVIEW_DTYPE_CACHE")
    if raw:
        return Path(raw).expanduser()
    return model_cache_dir() / "dtype-probe.json"


def fingerprint(*, model_id: str, device: str, threads: int, flags: set[str] | None = None) -> dict[str, Any]:
    """What a probe's figures depend on: CPU model and flags, device, torch version, threads, model."""
    import torch

    hw = hardware_describe()
    flags = cpu_flags() if flags is None else flags
    out: dict[str, Any] = {
        "cpu_model": hw.get("cpu_model", ""),
        "machine": platform.machine(),
        "cpu_flags_sha256": hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:16],
        "torch": torch.__version__,
        "device": device,
        "threads": threads,
        "model": model_id,
    }
    if device == "cuda":
        out["gpus"] = [g.get("name") for g in hw.get("gpus", [])]
    return out


def fingerprint_key(fp: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()


def _cache_read(path: Path) -> dict[str, Any]:
    """The cache's entries; ``{}`` for a missing, unreadable or malformed file (it is rewritten later)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if (
        not isinstance(data, dict)
        or data.get("version") != CACHE_VERSION
        or not isinstance(data.get("entries"), dict)
    ):
        return {}
    return data["entries"]


def _cache_write(path: Path, key: str, entry: dict[str, Any]) -> None:
    """Add one entry atomically (temp file + rename); a cache that cannot be written is skipped."""
    entries = _cache_read(path)
    entries[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".dtype-probe-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump({"version": CACHE_VERSION, "entries": entries}, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp)


# -- the choice ---------------------------------------------------------------------------------------


def dtype_choose(
    *,
    requested: str,
    device: str,
    model_id: str,
    load: Callable[[str], Any],
    threads: int = 1,
    flags: set[str] | None = None,
    cache_path: Path | None = None,
    budget_s: float | None = None,
    measure: Callable[[Any], Rates] | None = None,
) -> DtypeChoice:
    """The dtype for a model on this machine.

    ``requested``: ``auto`` or a pinned dtype name (then nothing is probed or loaded). ``load(dtype)``
    returns the model loaded in that dtype (the probe frees it afterwards). ``flags`` overrides the
    CPU flags (tests); ``measure`` overrides the probe of one loaded model (tests).
    """
    if requested != "auto":
        return DtypeChoice(
            dtype=requested, source="pinned", reason=f"{requested}: pinned by engine_args.dtype"
        )
    flags = cpu_flags() if flags is None else flags
    if device == "cuda":
        import torch

        native = bool(torch.cuda.is_bf16_supported())
        detail = f"GPU {'supports' if native else 'lacks'} bf16 (torch.cuda.is_bf16_supported)"
    else:
        native, detail = cpu_bf16_native(flags)
    fp = fingerprint(model_id=model_id, device=device, threads=threads, flags=flags)
    key = fingerprint_key(fp)
    path = cache_path or dtype_cache_path()
    cached = _cache_read(path).get(key)
    if isinstance(cached, dict):
        try:
            choice = DtypeChoice.from_dict(cached)
        except (KeyError, TypeError, ValueError):
            choice = None  # a damaged entry: measure again
        if choice is not None and choice.fingerprint == fp:
            choice.source = "cache"
            return choice
    budget = probe_budget_s() if budget_s is None else budget_s
    run = measure or (lambda model: probe_rates(model, budget_s=budget))
    probe: dict[str, Rates] = {}
    for name in candidates(device=device, native_bf16=native):
        model = load(name)
        try:
            probe[name] = run(model)
        finally:
            del model
            gc.collect()
    dtype, reason = decide(probe=probe, native_bf16=native, native_detail=detail, device=device)
    choice = DtypeChoice(
        dtype=dtype,
        source="probe",
        reason=reason,
        native_bf16=native,
        native_detail=detail,
        probe=probe,
        fingerprint=fp,
        measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    _cache_write(path, key, choice.as_dict())
    return choice
