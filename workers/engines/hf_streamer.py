"""The ``hf`` engine's streamer: what transformers' ``generate`` puts, as the events a user sees.

transformers calls ``put`` once with the prompt, then once per decoding or verification step with
every token that step appended; each step becomes one event, timestamped with
``time.perf_counter()`` (seconds) when it was put, with the step's drafted and accepted counts
from ``hf_seam``'s recorder on a speculative run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class ChunkStreamer:
    """A transformers streamer turning each ``put`` (one decoding or verification step) into one event.

    Runs in the generation thread; ``emit`` hands events to the event loop. The first ``put``
    is the prompt and is skipped. Finality is known at ``put`` time (EOS or the token budget
    are the only stopping criteria we set), so the last chunk carries its finish_reason.
    """

    def __init__(self, *, emit: Callable[[Any], None], eos_ids: set[int], max_tokens: int, recorder: Any):
        self.emit = emit
        self.eos_ids = eos_ids
        self.max_tokens = max_tokens
        self.recorder = recorder
        self.generated = 0
        self.prompt_seen = False
        self.prompt_tokens: int | None = None  # the templated prompt's length, told with the first chunk

    def put(self, value: Any) -> None:
        t = time.perf_counter()
        if not self.prompt_seen:
            self.prompt_seen = True
            self.prompt_tokens = int(value.numel())
            return
        ids = [int(x) for x in value.reshape(-1).tolist()]
        self.generated += len(ids)
        drafted = accepted = None
        if self.recorder is not None:
            drafted = self.recorder.pending_drafted() or 0
            accepted = len(ids) - 1  # cross-checked against num_matches in hf_seam
        finish = None
        if ids and ids[-1] in self.eos_ids:
            finish = "stop"
        elif self.generated >= self.max_tokens:
            finish = "length"
        prompt_tokens, self.prompt_tokens = self.prompt_tokens, None
        self.emit((ids, t, drafted, accepted, finish, prompt_tokens))

    def end(self) -> None:
        pass
