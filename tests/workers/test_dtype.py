"""Choosing the hf engine's number format: native support (fake CPU flags), the rule, the cache, the probe."""

from __future__ import annotations

import json

import pytest

from workers import dtype as dt
from workers.dtype import DtypeChoice, Rates, cpu_bf16_native, cpu_flags, decide, dtype_choose

AVX2_ONLY = {"fpu", "sse4_2", "avx", "avx2", "fma"}  # this development machine's kind
SAPPHIRE_RAPIDS = AVX2_ONLY | {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}

FAST_BF16 = {
    "float32": Rates(prefill_tok_s=400.0, decode_tok_s=10.0, prefill_tokens=64, decode_tokens=8),
    "bfloat16": Rates(prefill_tok_s=900.0, decode_tok_s=22.0, prefill_tokens=64, decode_tokens=8),
}
SLOW_BF16 = {
    "float32": Rates(prefill_tok_s=400.0, decode_tok_s=10.0, prefill_tokens=64, decode_tokens=8),
    "bfloat16": Rates(prefill_tok_s=40.0, decode_tok_s=4.0, prefill_tokens=8, decode_tokens=2),
}


class Calls:
    """A fake loader and probe: counts what the choice loaded and measured, returns scripted rates."""

    def __init__(self, rates: dict[str, Rates]):
        self.rates = rates
        self.loaded: list[str] = []

    def load(self, name: str) -> str:
        self.loaded.append(name)
        return name  # the "model" is its dtype name

    def measure(self, model: str) -> Rates:
        return self.rates[model]


def _choose(calls: Calls, tmp_path, *, flags=AVX2_ONLY, requested="auto", model_id="smollm2-135m@abc"):
    return dtype_choose(
        requested=requested,
        device="cpu",
        model_id=model_id,
        load=calls.load,
        threads=2,
        flags=flags,
        cache_path=tmp_path / "dtype-probe.json",
        measure=calls.measure,
    )


def test_it_reads_x86_and_arm_flags_from_cpuinfo_text():
    x86 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx avx2 fma\n"
    arm = "processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n"
    assert cpu_flags(x86) == {"fpu", "avx", "avx2", "fma"}
    assert cpu_flags(arm) == {"fp", "asimd", "bf16", "i8mm"}
    assert cpu_flags("nothing here") == set()


def test_it_says_bf16_is_native_only_with_a_bf16_flag():
    assert cpu_bf16_native(AVX2_ONLY) == (False, "CPU lacks native bf16 (no avx512_bf16/amx_bf16/bf16 flag)")
    native, why = cpu_bf16_native(SAPPHIRE_RAPIDS)
    assert native and "avx512_bf16" in why and "amx_bf16" in why
    assert cpu_bf16_native({"fp", "asimd", "bf16"})[0]
    assert not cpu_bf16_native({"avx512f", "avx512bw"})[0]  # AVX-512 without its bf16 extension


def test_it_keeps_fp32_without_native_bf16_even_when_a_probe_favours_bf16():
    dtype, reason = decide(probe=FAST_BF16, native_bf16=False, native_detail="CPU lacks native bf16")
    assert dtype == "float32"
    assert reason.startswith(
        "float32: CPU lacks native bf16; probe: fp32 prefill 400 tok/s, decode 10.0 tok/s"
    )
    assert "vs bf16 prefill 900 tok/s, decode 22.0 tok/s" in reason


def test_it_picks_bf16_when_native_and_faster_by_the_margin():
    dtype, reason = decide(probe=FAST_BF16, native_bf16=True, native_detail="CPU has native bf16 (amx_bf16)")
    assert dtype == "bfloat16"
    assert "faster on a 512+64-token request" in reason


def test_it_keeps_fp32_when_native_bf16_is_not_fast_enough():
    near = {
        "float32": FAST_BF16["float32"],
        "bfloat16": Rates(prefill_tok_s=420.0, decode_tok_s=10.5, prefill_tokens=64, decode_tokens=8),
    }
    dtype, reason = decide(probe=near, native_bf16=True, native_detail="CPU has native bf16")
    assert dtype == "float32"
    assert "only 1.05x" in reason and "needs 1.10x" in reason


def test_it_probes_both_dtypes_on_an_avx2_cpu_and_picks_fp32(tmp_path):
    calls = Calls(SLOW_BF16)
    choice = _choose(calls, tmp_path)
    assert choice.dtype == "float32" and choice.source == "probe"
    assert calls.loaded == ["float32", "bfloat16"]
    assert choice.native_bf16 is False
    assert "CPU lacks native bf16" in choice.reason and "vs bf16 prefill 40 tok/s" in choice.reason
    assert choice.fingerprint["model"] == "smollm2-135m@abc" and choice.fingerprint["threads"] == 2


def test_it_reuses_the_cached_probe_for_the_same_host_and_model(tmp_path):
    first = _choose(Calls(SLOW_BF16), tmp_path)
    again = Calls(FAST_BF16)  # would say something else if it were asked
    second = _choose(again, tmp_path)
    assert again.loaded == []
    assert second.source == "cache"
    assert second.dtype == first.dtype and second.reason == first.reason
    assert second.probe == first.probe
    # Another model on the same host is measured on its own.
    other = Calls(SLOW_BF16)
    assert _choose(other, tmp_path, model_id="gemma3-270m@def").source == "probe"
    assert other.loaded == ["float32", "bfloat16"]
    entries = json.loads((tmp_path / "dtype-probe.json").read_text())["entries"]
    assert len(entries) == 2


def test_it_measures_again_when_the_host_differs(tmp_path):
    _choose(Calls(SLOW_BF16), tmp_path, flags=AVX2_ONLY)
    calls = Calls(FAST_BF16)
    choice = _choose(calls, tmp_path, flags=SAPPHIRE_RAPIDS)
    assert calls.loaded == ["float32", "bfloat16"]
    assert choice.dtype == "bfloat16" and choice.source == "probe"


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff not json at all",
        b'{"version": 1, "entries": [1, 2]}',
        b'{"version": 99, "entries": {}}',
        b"[]",
        b"",
    ],
)
def test_it_survives_a_corrupt_cache_file_by_probing_again(tmp_path, content):
    (tmp_path / "dtype-probe.json").write_bytes(content)
    calls = Calls(SLOW_BF16)
    choice = _choose(calls, tmp_path)
    assert choice.source == "probe" and choice.dtype == "float32"
    assert calls.loaded == ["float32", "bfloat16"]
    # The file was rewritten whole, and the next run reuses it.
    assert _choose(Calls(FAST_BF16), tmp_path).source == "cache"


def test_it_probes_again_over_a_damaged_entry(tmp_path):
    _choose(Calls(SLOW_BF16), tmp_path)
    path = tmp_path / "dtype-probe.json"
    data = json.loads(path.read_text())
    (key,) = data["entries"]
    data["entries"][key]["probe"]["float32"]["prefill_tok_s"] = -3
    path.write_text(json.dumps(data))
    calls = Calls(SLOW_BF16)
    assert _choose(calls, tmp_path).source == "probe"
    data["entries"][key]["dtype"] = "int4"
    data["entries"][key]["probe"]["float32"]["prefill_tok_s"] = 3
    path.write_text(json.dumps(data))
    assert _choose(Calls(SLOW_BF16), tmp_path).source == "probe"


def test_a_pinned_dtype_skips_the_probe_and_the_cache(tmp_path):
    calls = Calls(FAST_BF16)
    choice = _choose(calls, tmp_path, requested="bfloat16", flags=AVX2_ONLY)
    assert choice == DtypeChoice(
        dtype="bfloat16", source="pinned", reason="bfloat16: pinned by engine_args.dtype"
    )
    assert calls.loaded == []
    assert not (tmp_path / "dtype-probe.json").exists()


def test_an_unwritable_cache_does_not_fail_the_choice(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    choice = dtype_choose(
        requested="auto",
        device="cpu",
        model_id="m",
        load=Calls(SLOW_BF16).load,
        flags=AVX2_ONLY,
        cache_path=blocker / "dtype-probe.json",  # its parent is a file
        measure=Calls(SLOW_BF16).measure,
    )
    assert choice.dtype == "float32"


def test_it_refuses_a_bad_probe_budget_in_the_environment(monkeypatch):
    monkeypatch.setenv("SPECREVIEW_DTYPE_PROBE_S", "fast")
    with pytest.raises(ValueError, match="SPECREVIEW_DTYPE_PROBE_S must be a number of seconds"):
        dt.probe_budget_s()
    monkeypatch.setenv("SPECREVIEW_DTYPE_PROBE_S", "1.5")
    assert dt.probe_budget_s() == 1.5


@pytest.mark.model
def test_the_real_probe_measures_positive_bounded_rates_on_smollm2():
    import torch
    from transformers import AutoModelForCausalLM

    from workers.catalog.resolve import model_resolve

    model = AutoModelForCausalLM.from_pretrained(
        model_resolve(name_or_path="smollm2-135m"), dtype=torch.float32
    )
    rates = dt.probe_rates(model.eval(), budget_s=0.5)
    assert rates.prefill_tok_s > 0 and rates.decode_tok_s > 0
    assert 4 <= rates.prefill_tokens <= 256 and 1 <= rates.decode_tokens <= 32
