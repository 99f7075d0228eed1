"""The embedded default engine: Hugging Face transformers, CPU (or one GPU), one request at a time.

Baseline: plain greedy or seeded sampled decoding. Candidates (vLLM's keys):

* ``ngram``: prompt lookup. ``num_speculative_tokens`` (k), ``prompt_lookup_max`` and
  ``prompt_lookup_min`` mean what they mean in vLLM, with vLLM's defaults (both 5 when
  neither is given; one given sets the other).
* ``draft_model``: assisted generation with ``model`` (catalog name, HF folder or GGUF)
  proposing ``num_speculative_tokens`` per step. ``draft_length_schedule``: "constant"
  (exactly k, the default), "heuristic" (transformers': +2 after a fully accepted step,
  -1 otherwise, reset per request) or "dynamic" (transformers' confidence threshold: the
  draft stops early when its top probability drops below ``draft_confidence_threshold``,
  default 0.4). A draft whose tokenizer differs from the target's runs through
  transformers' universal assisted generation, greedy only: a sampled request is refused.

Each verification step reaches the consumer as ONE chunk carrying every token it
accepted, timestamped once with ``time.perf_counter()``, with ``drafted``/``accepted``
counted by ``hf_seam``. Generation runs in a single worker thread, so concurrent
``stream`` calls queue in arrival order: that is this engine's real capacity.

This module is the engine's lifecycle, requests and counters; its parts: ``hf_config`` (accepted
configs, the speculative plan), ``hf_load`` (device and models), ``hf_streamer`` (steps as
events) and ``hf_seam`` (per-step acceptance counts).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil

from workers.catalog.cache import model_marker
from workers.catalog.resolve import model_check, model_resolve
from workers.dtype import DtypeChoice, dtype_choose

from .base import Chunk, EngineConfig, EngineError, EngineRequest
from .hf_config import DTYPES, SpecPlan, engine_args_check, spec_plan
from .hf_load import device_prepare, eos_ids, model_load, model_with_tokenizer_load
from .hf_streamer import ChunkStreamer

_END = object()


class HFEngine:
    """The ``hf`` engine. See the module docstring for what each config means."""

    kind = "hf"

    def __init__(self) -> None:
        self._model: Any = None
        self._draft: Any = None
        self._tokenizer: Any = None
        self._draft_tokenizer: Any = None
        self._same_tokenizer = True
        self._plan: SpecPlan | None = None
        self._config: EngineConfig | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._eos_ids: set[int] = set()
        self._counters_lock = threading.Lock()
        self._active: set[threading.Event] = set()  # cancel flags of requests queued or running
        self._stopping = False
        self._counters = self._zero_counters()
        self._info: dict[str, str] = {}
        self._dtype_choice: DtypeChoice | None = None

    # -- validation -------------------------------------------------------------------------

    @classmethod
    def validate(cls, config: EngineConfig) -> SpecPlan | None:
        """Check a config without loading any model: methods, keys, k >= 1, models resolvable.

        Raises EngineError with a message a user can act on (a missing model names the
        ``python manage.py models fetch NAME`` command).
        """
        if config.engine != cls.kind:
            raise EngineError(f"config is for engine {config.engine!r}, not 'hf'")
        engine_args_check(config.engine_args or {})
        plan = spec_plan(config.speculative_config)
        model_check(name_or_path=config.target_model)
        if plan is not None and plan.draft is not None:
            model_check(name_or_path=plan.draft)
        return plan

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, config: EngineConfig) -> None:
        plan = self.validate(config)  # before the heavy imports: a bad config fails in milliseconds

        import torch
        import transformers

        # seam: hf_seam imports transformers (heavy) at its top; a config check must not load it
        from .hf_seam import seam_check_version

        if plan is not None:
            seam_check_version()
        args = config.engine_args or {}
        device = device_prepare(args)

        t0 = time.perf_counter()
        target_folder = model_resolve(name_or_path=config.target_model)
        target_sha = str(model_marker(target_folder).get("source_sha256", ""))
        self._dtype_choice = dtype_choose(
            requested=DTYPES[args.get("dtype", "auto")],
            device=device,
            # The cached folder's source hash names the weights, wherever the folder lives.
            model_id=f"{config.target_model}@{target_sha or target_folder}",
            load=lambda name: model_load(
                folder=target_folder, name=config.target_model, dtype=getattr(torch, name), device=device
            ),
            threads=torch.get_num_threads(),
        )
        probe_s = time.perf_counter() - t0
        dtype = getattr(torch, self._dtype_choice.dtype)
        t0 = time.perf_counter()
        self._model, self._tokenizer, _ = model_with_tokenizer_load(
            name=config.target_model, dtype=dtype, device=device
        )
        self._info = {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "target_model": config.target_model,
            "target_sha256": target_sha,
            "dtype": str(dtype).removeprefix("torch."),
            "device": device,
            "threads": str(torch.get_num_threads()),
        }
        if self._dtype_choice.source == "probe":
            self._dtype_choice.probe_s = round(probe_s, 2)
        if plan is not None and plan.draft is not None:
            self._draft, self._draft_tokenizer, draft_folder = model_with_tokenizer_load(
                name=plan.draft, dtype=dtype, device=device
            )
            self._same_tokenizer = self._draft_tokenizer.get_vocab() == self._tokenizer.get_vocab()
            self._info["draft_model"] = plan.draft
            self._info["draft_sha256"] = str(model_marker(draft_folder).get("source_sha256", ""))
            self._info["draft_tokenizer"] = (
                "same" if self._same_tokenizer else "different (universal assisted)"
            )
        self._info["load_s"] = f"{time.perf_counter() - t0:.2f}"
        self._eos_ids = eos_ids(model=self._model, tokenizer=self._tokenizer)
        self._plan = plan
        self._config = config
        self._stopping = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-engine")

    def stop(self) -> None:
        if self._executor is not None:
            # Cancel the running request at its next step and let queued ones fail fast, so
            # every consumer hears why its stream ended.
            self._stopping = True
            for cancel in list(self._active):
                cancel.set()
            self._executor.shutdown(wait=True)
            self._executor = None
        self._model = self._draft = self._tokenizer = self._draft_tokenizer = None
        gc.collect()

    # -- requests ---------------------------------------------------------------------------

    def encode(self, request: EngineRequest) -> Any:
        """Token ids (1 x n tensor) for a request: chat messages through the chat template, else raw text."""
        tok = self._tokenizer
        if request.messages is not None:
            if not tok.chat_template:
                raise EngineError(
                    f"model {self._info.get('target_model')!r} has no chat template; send a raw prompt instead"
                )
            kwargs: dict[str, Any] = {
                "add_generation_prompt": True,
                "return_tensors": "pt",
                "return_dict": True,
            }
            if request.tools:
                kwargs["tools"] = request.tools
            return tok.apply_chat_template(request.messages, **kwargs)["input_ids"]
        if request.prompt is None:
            raise EngineError(f"request {request.request_id!r} has neither prompt nor messages")
        return tok(request.prompt, return_tensors="pt")["input_ids"]

    def generation_kwargs(self, request: EngineRequest) -> dict[str, Any]:
        """What ``model.generate`` is called with for this request, speculation included.

        Also used by bench/engine_overhead.py so the direct calls use the same settings.
        """
        from transformers import GenerationConfig

        greedy = request.temperature == 0
        config = GenerationConfig(
            max_new_tokens=request.max_tokens,
            do_sample=not greedy,
            eos_token_id=sorted(self._eos_ids),
            pad_token_id=self._tokenizer.pad_token_id
            if self._tokenizer.pad_token_id is not None
            else min(self._eos_ids, default=0),
        )
        if not greedy:
            # top_k=0 switches off transformers' default top-k of 50: vLLM samples the whole vocabulary.
            config.update(temperature=request.temperature, top_p=request.top_p, top_k=0)
        kwargs: dict[str, Any] = {"generation_config": config}
        plan = self._plan
        if plan is not None and plan.method == "ngram":
            config.update(prompt_lookup_num_tokens=plan.k, max_matching_ngram_size=plan.lookup_max)
        elif plan is not None and plan.method == "draft_model":
            # Set on the draft's own generation_config, which transformers reads each call; resetting
            # it per request keeps requests independent of each other's history.
            draft_config = self._draft.generation_config
            draft_config.num_assistant_tokens = plan.k
            draft_config.num_assistant_tokens_schedule = (
                "heuristic_transient" if plan.schedule == "heuristic" else "constant"
            )
            # 0 disables the stop-on-low-confidence criterion (transformers' default is 0.4).
            draft_config.assistant_confidence_threshold = plan.confidence or 0.0
            kwargs["assistant_model"] = self._draft
            if not self._same_tokenizer:
                kwargs["tokenizer"] = self._tokenizer
                kwargs["assistant_tokenizer"] = self._draft_tokenizer
        return kwargs

    def _generate(self, request: EngineRequest, emit: Callable[[Any], None], cancel: threading.Event) -> None:
        import torch
        from transformers import StoppingCriteriaList

        # seam: hf_seam imports transformers (heavy) at its top
        from .hf_seam import Cancelled, StepRecorder, counting_steps

        if cancel.is_set():
            return
        input_ids = self.encode(request).to(self._model.device)
        kwargs = self.generation_kwargs(request)
        recorder = StepRecorder() if self._plan is not None else None
        streamer = ChunkStreamer(
            emit=emit, eos_ids=self._eos_ids, max_tokens=request.max_tokens, recorder=recorder
        )
        if request.temperature != 0 and request.seed is not None:
            torch.manual_seed(request.seed)
        seam = (
            contextlib.nullcontext()
            if recorder is None or self._plan is None
            else counting_steps(self._model, recorder, prompt_lookup_min=self._plan.lookup_min)
        )
        with torch.inference_mode(), seam:
            self._model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                streamer=streamer,
                stopping_criteria=StoppingCriteriaList([Cancelled(cancel)]),
                **kwargs,
            )
        self._count(streamer.generated, recorder)

    async def stream(self, request: EngineRequest) -> AsyncIterator[Chunk]:
        if self._executor is None:
            raise EngineError("the hf engine is not started")
        if request.max_tokens < 1:
            raise EngineError(
                f"request {request.request_id!r}: max_tokens must be >= 1, got {request.max_tokens}"
            )
        if request.temperature != 0 and self._draft is not None and not self._same_tokenizer:
            # Sampling across vocabularies (universal speculative decoding) cannot be counted at
            # the seam nor trusted to keep the target's distribution: refused, not run quietly.
            raise EngineError(
                f"request {request.request_id!r} samples (temperature {request.temperature:g}), but the "
                f"draft {self._info.get('draft_model')!r} has another tokenizer than the target: the hf "
                "engine runs cross-vocabulary drafts greedy only (temperature 0); use a draft of the "
                "target's tokenizer family, or greedy sampling for this experiment"
            )
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        cancel = threading.Event()

        def emit(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the consumer's event loop is gone: nobody is listening any more
                cancel.set()

        def run() -> None:
            try:
                if self._stopping:
                    raise EngineError(
                        f"the hf engine was stopped before request {request.request_id!r} finished"
                    )
                self._generate(request, emit, cancel)
            except BaseException as exc:  # handed to the consumer, which re-raises it
                emit(exc)
            finally:
                emit(_END)

        self._active.add(cancel)
        future = loop.run_in_executor(self._executor, run)
        tok = self._tokenizer
        ids: list[int] = []
        shown = ""
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    break
                if isinstance(item, EngineError):
                    raise item
                if isinstance(item, BaseException):
                    raise EngineError(
                        f"generation failed for request {request.request_id!r}: {item!r}"
                    ) from item
                new_ids, t, drafted, accepted, finish, prompt_tokens = item
                ids.extend(new_ids)
                text = tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
                # Hold back a trailing partial UTF-8 character until the token that completes it.
                if finish is None and text.endswith("\ufffd"):
                    delta = ""
                else:
                    delta = text[len(shown) :]
                    shown = text
                yield Chunk(
                    token_ids=new_ids,
                    text=delta,
                    t=t,
                    drafted=drafted,
                    accepted=accepted,
                    finish_reason=finish,
                    prompt_tokens=prompt_tokens,
                )
        finally:
            cancel.set()
            self._active.discard(cancel)
            if not future.done():
                # Let a cancelled request's thread wind down without blocking the event loop.
                future.add_done_callback(lambda f: f.exception())

    # -- reporting --------------------------------------------------------------------------

    @staticmethod
    def _zero_counters() -> dict[str, Any]:
        return {
            "requests": 0,
            "generated_tokens": 0,
            "spec_decode_num_drafts": 0,
            "spec_decode_num_draft_tokens": 0,
            "spec_decode_num_accepted_tokens": 0,
            "spec_decode_num_draft_tokens_per_pos": [],
            "spec_decode_num_accepted_tokens_per_pos": [],
            "seam_mismatches": 0,
        }

    def _count(self, generated: int, recorder: Any) -> None:
        # seam: hf_seam imports transformers (heavy) at its top
        from .hf_seam import per_position

        with self._counters_lock:
            c = self._counters
            c["requests"] += 1
            c["generated_tokens"] += generated
            if recorder is None:
                return
            c["spec_decode_num_drafts"] += len(recorder.steps)
            c["spec_decode_num_draft_tokens"] += recorder.drafted_total
            c["spec_decode_num_accepted_tokens"] += recorder.accepted_total
            c["seam_mismatches"] += recorder.mismatches
            drafted, accepted = per_position(recorder.steps)
            for key, values in (
                ("spec_decode_num_draft_tokens_per_pos", drafted),
                ("spec_decode_num_accepted_tokens_per_pos", accepted),
            ):
                total = c[key]
                total.extend([0] * (len(values) - len(total)))
                for j, v in enumerate(values):
                    total[j] += v

    def counters(self) -> dict[str, Any]:
        """Totals since start: requests, tokens, verification steps, drafted/accepted tokens (and per position)."""
        with self._counters_lock:
            return {k: list(v) if isinstance(v, list) else v for k, v in self._counters.items()}

    def memory(self) -> dict[str, Any]:
        """Bytes: the process's resident set, and CUDA memory allocated when on a GPU."""
        out: dict[str, Any] = {"rss_bytes": psutil.Process().memory_info().rss}
        if self._info.get("device") == "cuda":
            import torch

            out["gpu_bytes"] = torch.cuda.memory_allocated()
        return out

    def versions(self) -> dict[str, str]:
        return {"engine": "hf", **self._info}

    def dtype_choice(self) -> dict[str, Any] | None:
        """The number format this engine runs in and why (``workers.dtype.DtypeChoice``), JSON-safe."""
        return None if self._dtype_choice is None else self._dtype_choice.as_dict()
