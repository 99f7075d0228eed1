"""The openai engine against a real OpenAI-compatible server serving a real model (hf, smollm2).

The local server wraps the hf engine (n-gram speculation) and exposes vLLM's spec-decode
counters; what the openai engine streams over HTTP must be exactly what the hf engine
produced, and the /metrics deltas must equal the steps the hf engine reported.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.stream_server import stream_server_start
from workers.engines.base import EngineConfig, EngineRequest
from workers.engines.openai_http import OpenAIEngine
from workers.replay.records import RequestSpec
from workers.replay.run import replay_run_sync

pytestmark = [pytest.mark.model, pytest.mark.slow]

SMOL = "smollm2-135m"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
PROMPT = "def add(a, b):\n    return a + b\n\ndef add3(a, b, c):\n    return"


@pytest.fixture(scope="module")
def served():
    from workers.engines.hf import HFEngine

    engine = HFEngine()
    engine.start(EngineConfig(engine="hf", target_model=SMOL, speculative_config=NGRAM))
    server = stream_server_start(engine=engine, model=SMOL)
    yield server, engine
    server.stop()
    engine.stop()


def test_it_streams_what_the_served_engine_generated_and_its_spec_counters(served, openai_register):
    server, hf = served
    openai_register(server.base_url)
    direct = asyncio.run(_collect(hf, EngineRequest(request_id="direct", max_tokens=24, prompt=PROMPT)))

    client = OpenAIEngine()
    client.start(EngineConfig(engine="openai", target_model=SMOL, engine_args={"base_url": server.base_url}))
    result = replay_run_sync(
        engine=client,
        specs=[
            RequestSpec(
                request=EngineRequest(request_id="via-http", max_tokens=24, prompt=PROMPT), arrival_s=0.0
            )
        ],
    )
    record = result.records[0]
    assert record.status == "ok", record.error
    assert record.output_token_ids == [i for c in direct for i in c.token_ids]
    assert record.output_text == "".join(c.text for c in direct)
    # One SSE event per engine chunk: a step that accepted drafts arrives as one chunk.
    assert record.chunk_tokens == [len(c.token_ids) for c in direct if c.token_ids]
    steps = [(c.drafted, c.accepted) for c in direct if c.drafted]
    assert steps, "n-gram lookup on a repetitive prompt should have drafted"
    delta = result.counters_delta
    assert delta["spec_decode_num_drafts"] == len(steps)
    assert delta["spec_decode_num_draft_tokens"] == sum(d for d, _ in steps)
    assert delta["spec_decode_num_accepted_tokens"] == sum(a for _, a in steps)


async def _collect(engine, request):
    return [chunk async for chunk in engine.stream(request)]
