"""Per-verification-step acceptance counts at transformers' candidate-generator seam.

transformers does not report how many drafted tokens each verification step accepted, so
we count them where candidates enter and leave ``GenerationMixin._assisted_decoding``:

* ``candidate_generator.get_candidates(input_ids)`` returns the sequence extended by the
  draft: drafted k = ``len(candidates) - len(input_ids)`` (0 when prompt lookup finds no
  match or a draft declines to propose: the step is then plain decoding).
* ``streamer.put(valid_tokens)`` then receives every token the step appends, at once.
* ``candidate_generator.update_candidate_strategy(input_ids, scores, num_matches)`` is
  called with the extended sequence and the step's match count.

This is not a public API, so it lives here alone, pinned to the transformers range below,
and is checked at engine start and by tests/workers/test_hf_seam.py.

Truncation at the end of a request, handled explicitly: when a step's verified tokens run
past ``max_tokens`` or contain EOS, transformers cuts them (budget, then first EOS) and
recomputes ``num_matches = len(kept) - 1`` before calling ``update_candidate_strategy``.
We record ``emitted = len(kept)`` from the sequence growth and define
``accepted = emitted - 1``: drafted tokens the user received beyond the one token every
step yields. So per request Σ(accepted + 1) over steps equals the generated token count
exactly, and the last step's drafts that fell beyond the stop are counted as drafted but
not accepted (they were never shown to anyone). ``num_matches`` is cross-checked against
``emitted - 1`` each step; a disagreement (a transformers change) is counted in
``StepRecorder.mismatches`` instead of being papered over.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import transformers
from packaging.version import Version

from .base import EngineError

TRANSFORMERS_MIN = Version("5.16.1")
TRANSFORMERS_MAX = Version("5.20")  # exclusive


def seam_check_version(version: str | None = None) -> None:
    """Refuse a transformers release this seam was not verified against."""
    found = Version(version or transformers.__version__)
    if not (TRANSFORMERS_MIN <= found < TRANSFORMERS_MAX):
        raise EngineError(
            f"the hf engine counts acceptance at a transformers internal verified for "
            f">={TRANSFORMERS_MIN},<{TRANSFORMERS_MAX}; found {found}. Install a version in that range."
        )


@dataclass(frozen=True)
class Step:
    """One verification step: ``drafted`` tokens proposed, ``accepted`` of them shown, ``emitted`` shown in all."""

    drafted: int
    accepted: int
    emitted: int


@dataclass
class StepRecorder:
    """Collects the steps of one request. Single-threaded: the generation thread alone writes it."""

    steps: list[Step] = field(default_factory=list)
    mismatches: int = 0
    _input_len: int | None = None
    _drafted: int | None = None

    def proposed(self, *, input_len: int, candidate_len: int) -> None:
        self._input_len = input_len
        self._drafted = max(candidate_len - input_len, 0)

    def pending_drafted(self) -> int | None:
        """Drafted count of the step being verified now (the streamer reads it at ``put``)."""
        return self._drafted

    def verified(self, *, new_len: int, num_matches: int) -> Step:
        if self._input_len is None or self._drafted is None:
            raise RuntimeError(
                "update_candidate_strategy without get_candidates: transformers changed the loop"
            )
        emitted = new_len - self._input_len
        step = Step(drafted=self._drafted, accepted=emitted - 1, emitted=emitted)
        if num_matches != step.accepted or step.accepted > step.drafted:
            self.mismatches += 1
        self.steps.append(step)
        self._input_len = self._drafted = None
        return step

    @property
    def drafted_total(self) -> int:
        return sum(s.drafted for s in self.steps)

    @property
    def accepted_total(self) -> int:
        return sum(s.accepted for s in self.steps)

    @property
    def emitted_total(self) -> int:
        return sum(s.emitted for s in self.steps)


def per_position(steps: list[Step]) -> tuple[list[int], list[int]]:
    """(drafted_per_pos, accepted_per_pos): how many steps drafted / had accepted position j (0-based).

    Their sums equal Σ drafted and Σ accepted. Position j is accepted only if 0..j-1 were.
    """
    width = max((s.drafted for s in steps), default=0)
    drafted = [0] * width
    accepted = [0] * width
    for s in steps:
        for j in range(s.drafted):
            drafted[j] += 1
        for j in range(s.accepted):
            accepted[j] += 1
    return drafted, accepted


def _min_ngram_match(input_ids: Any, *, min_n: int, max_n: int) -> bool:
    """Whether the sequence's last n tokens (min_n <= n <= max_n) occur earlier with a continuation."""
    seq = input_ids[0]
    length = seq.shape[0]
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        windows = seq.unfold(0, n, 1)[: length - n]  # drop the suffix itself: it has no continuation
        if (windows == seq[-n:]).all(dim=1).any():
            return True
    return False


def _instrument(generator: Any, recorder: StepRecorder, *, prompt_lookup_min: int | None) -> None:
    get_candidates = generator.get_candidates
    update = generator.update_candidate_strategy
    max_n = getattr(generator, "max_matching_ngram_size", None)

    def counted_get_candidates(input_ids, **kwargs):
        # transformers' prompt lookup tries n-gram sizes max..1; vLLM's prompt_lookup_min forbids
        # matches shorter than min, so a step whose only matches are shorter drafts nothing.
        if prompt_lookup_min and max_n and prompt_lookup_min > 1:
            if not _min_ngram_match(input_ids, min_n=prompt_lookup_min, max_n=max_n):
                recorder.proposed(input_len=input_ids.shape[1], candidate_len=input_ids.shape[1])
                return input_ids, None
        candidates, logits = get_candidates(input_ids, **kwargs)
        recorder.proposed(input_len=input_ids.shape[1], candidate_len=candidates.shape[1])
        return candidates, logits

    def counted_update(input_ids, scores, num_matches):
        recorder.verified(new_len=input_ids.shape[1], num_matches=int(num_matches))
        return update(input_ids, scores, num_matches)

    # Instance attributes shadow the class methods: the generator keeps its type, so every
    # isinstance check inside transformers still holds.
    generator.get_candidates = counted_get_candidates
    generator.update_candidate_strategy = counted_update


@contextlib.contextmanager
def counting_steps(
    model: Any, recorder: StepRecorder, *, prompt_lookup_min: int | None = None
) -> Iterator[None]:
    """Within this block, assisted ``model.generate`` calls record their steps into ``recorder``."""
    original = model._get_candidate_generator

    def instrumented(*args, **kwargs):
        generator = original(*args, **kwargs)
        _instrument(generator, recorder, prompt_lookup_min=prompt_lookup_min)
        return generator

    model._get_candidate_generator = instrumented
    try:
        yield
    finally:
        del model._get_candidate_generator


class Cancelled(transformers.StoppingCriteria):
    """Stops generation when ``cancel`` is set (the consumer walked away, the engine stops).

    Its tensor is on the ids' device: transformers ORs it with its own criteria's tensors, so a
    CPU tensor broke every generation on CUDA (seen on an H200 with ``bench/gpu_check.py``).
    """

    def __init__(self, cancel: threading.Event):
        self.cancel = cancel

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:  # noqa: ARG002
        return torch.full(
            (input_ids.shape[0],), self.cancel.is_set(), dtype=torch.bool, device=input_ids.device
        )
