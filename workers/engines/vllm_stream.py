"""One request through vLLM: its sampling settings and prompt, the pump that runs on the engine's
loop, and how vLLM's outputs become chunks and its failures EngineErrors.

With ``RequestOutputKind.DELTA`` one vLLM output is one chunk: every token the engine made
visible at once. On a speculative request's final output, one zero-token chunk per verification
step follows, with ``drafted``/``accepted`` set (see the ``vllm`` module docstring).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .base import Chunk, EngineError, EngineRequest

END = object()  # put on the caller's queue after a request's last chunk


def sampling_params_build(request: EngineRequest) -> Any:
    """vLLM SamplingParams for a request: greedy at temperature 0, seeded otherwise, DELTA outputs."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    kwargs: dict[str, Any] = {
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "seed": request.seed,
        "output_kind": RequestOutputKind.DELTA,
    }
    if request.response_format is not None:
        kwargs["structured_outputs"] = _structured_outputs(request.response_format)
    try:
        return SamplingParams(**kwargs)
    except (TypeError, ValueError) as exc:
        raise EngineError(
            f"request {request.request_id!r}: vLLM refused its sampling settings: {exc}"
        ) from exc


def engine_prompt(token_ids: list[int]) -> Any:
    """The prompt as vLLM's engine takes it: its typed input where vLLM has one (0.32+)."""
    try:
        from vllm.inputs import tokens_input
    except ImportError:
        return {"prompt_token_ids": token_ids}
    return tokens_input(token_ids)


async def outputs_pump(
    llm: Any,
    prompt: Any,
    params: Any,
    request_id: str,
    caller: asyncio.AbstractEventLoop,
    queue: asyncio.Queue,
) -> None:
    """Runs on the engine loop: turn vLLM outputs into chunks on the caller's queue."""

    def put(item: Any) -> None:
        try:
            caller.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the caller's loop is gone: nobody is listening any more
            pass

    try:
        async for output in llm.generate(prompt, params, request_id):
            t = time.perf_counter()
            for chunk in output_chunks(output, t=t):
                put(chunk)
    except asyncio.CancelledError:
        # Either the consumer left (nobody reads this) or stop() ended requests in flight.
        put(
            EngineError(f"request {request_id!r} was cancelled: the vllm engine stopped or the consumer left")
        )
        raise
    except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises EngineError
        put(exc)
    finally:
        put(END)


def output_chunks(output: Any, *, t: float) -> list[Chunk]:
    """The chunks for one vLLM RequestOutput (DELTA): its tokens, then, on the final output of a
    speculative request, one zero-token chunk per verification step (drafted, accepted draft tokens).
    """
    completion = output.outputs[0]
    finish = completion.finish_reason if output.finished else None
    prompt_ids = getattr(output, "prompt_token_ids", None)
    chunks = []
    if completion.token_ids or completion.text or finish:
        chunks.append(
            Chunk(
                token_ids=list(completion.token_ids),
                text=completion.text,
                t=t,
                finish_reason=finish,
                prompt_tokens=len(prompt_ids) if prompt_ids else None,
            )
        )
    metrics = getattr(completion, "spec_decode_metrics", None)
    if output.finished and metrics is not None:
        for drafted, accepted in zip(metrics.per_step_drafted, metrics.per_step_accepted, strict=True):
            chunks.append(
                Chunk(
                    token_ids=[],
                    text="",
                    t=t,
                    drafted=int(drafted),
                    accepted=int(accepted),
                    finish_reason=finish,
                )
            )
    return chunks


def _structured_outputs(response_format: dict[str, Any]) -> Any:
    """vLLM structured-output params for an OpenAI-style ``response_format``."""
    from vllm.sampling_params import StructuredOutputsParams

    kind = response_format.get("type")
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise EngineError("response_format json_schema needs json_schema.schema (an object)")
        return StructuredOutputsParams(json=schema)
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if kind == "text":
        return None
    raise EngineError(f"response_format type {kind!r} is not supported by the vllm engine")


def engine_error(exc: BaseException, request_id: str) -> EngineError:
    if isinstance(exc, EngineError):
        return exc
    name = type(exc).__name__
    cause = exc.__cause__ or exc
    if name == "EngineDeadError":
        return EngineError(f"the vLLM engine process died while serving {request_id!r}: {cause}")
    return EngineError(f"vLLM failed request {request_id!r}: {type(cause).__name__}: {cause}")
