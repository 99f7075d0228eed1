"""The acceptance-counting seam: pure bookkeeping here, a real model in test_hf_engine.py."""

from __future__ import annotations

import threading

import pytest
import torch

from workers.engines.base import EngineError
from workers.engines.hf_seam import (
    Cancelled,
    Step,
    StepRecorder,
    _min_ngram_match,
    counting_steps,
    per_position,
    seam_check_version,
)


def _run_steps(recorder: StepRecorder, steps: list[tuple[int, int]], *, prompt_len: int = 10) -> int:
    """Drive the recorder the way _assisted_decoding does: (drafted, kept tokens) per step."""
    length = prompt_len
    for drafted, kept in steps:
        recorder.proposed(input_len=length, candidate_len=length + drafted)
        length += kept
        recorder.verified(new_len=length, num_matches=kept - 1)
    return length - prompt_len


def test_it_counts_accepted_plus_one_per_step_as_the_generated_tokens():
    recorder = StepRecorder()
    generated = _run_steps(recorder, [(4, 5), (4, 1), (0, 1), (3, 2), (4, 3)])
    assert [s.accepted for s in recorder.steps] == [4, 0, 0, 1, 2]
    assert sum(s.accepted + 1 for s in recorder.steps) == generated == recorder.emitted_total == 12
    assert recorder.drafted_total == 15
    assert recorder.mismatches == 0


def test_it_counts_a_final_step_cut_at_max_tokens_as_drafted_but_not_accepted():
    # 6 drafted, all would match, but only 3 tokens of budget were left: the user saw 3.
    recorder = StepRecorder()
    _run_steps(recorder, [(6, 3)])
    assert recorder.steps == [Step(drafted=6, accepted=2, emitted=3)]


def test_it_flags_a_match_count_that_disagrees_with_the_sequence_growth():
    recorder = StepRecorder()
    recorder.proposed(input_len=10, candidate_len=14)
    recorder.verified(new_len=12, num_matches=3)  # grew by 2, yet claims 3 matches
    assert recorder.mismatches == 1


def test_it_refuses_a_verification_without_a_proposal():
    with pytest.raises(RuntimeError, match="transformers changed"):
        StepRecorder().verified(new_len=3, num_matches=0)


def test_it_sums_per_position_counts_to_the_totals():
    steps = [Step(4, 4, 5), Step(4, 1, 2), Step(0, 0, 1), Step(2, 0, 1), Step(5, 3, 4)]
    drafted, accepted = per_position(steps)
    assert drafted == [4, 4, 3, 3, 1]
    assert accepted == [3, 2, 2, 1, 0]
    assert sum(drafted) == sum(s.drafted for s in steps)
    assert sum(accepted) == sum(s.accepted for s in steps)


def test_it_finds_ngram_matches_only_at_or_above_the_minimum_size():
    seq = torch.tensor([[5, 6, 7, 1, 2, 9, 6, 7]])  # suffix [6, 7] occurs earlier; [9, 6, 7] does not
    assert _min_ngram_match(seq, min_n=1, max_n=3)
    assert _min_ngram_match(seq, min_n=2, max_n=3)
    assert not _min_ngram_match(seq, min_n=3, max_n=3)


def test_it_ignores_the_suffix_matching_itself():
    assert not _min_ngram_match(torch.tensor([[1, 2, 3, 4]]), min_n=1, max_n=2)


def test_it_accepts_the_pinned_transformers_range_only():
    seam_check_version("5.16.1")
    seam_check_version("5.19.0")
    for bad in ("5.15.0", "5.20.0", "6.0.0"):
        with pytest.raises(EngineError, match=">=5.16.1,<5.20"):
            seam_check_version(bad)


def test_it_runs_on_the_installed_transformers():
    seam_check_version()


def test_it_restores_the_models_candidate_generator_factory():
    class Model:
        def _get_candidate_generator(self):
            return "original"

    model = Model()
    with counting_steps(model, StepRecorder()):
        assert "_get_candidate_generator" in vars(model)
    assert "_get_candidate_generator" not in vars(model)
    assert model._get_candidate_generator() == "original"


@pytest.mark.parametrize("is_set", [False, True])
def test_the_cancel_criterion_answers_on_the_device_of_the_ids(is_set):
    # On CUDA a CPU answer broke every generation (bench/gpu_check.py on an H200); "meta" stands
    # in for a device other than the CPU here.
    cancel = threading.Event()
    if is_set:
        cancel.set()
    ids = torch.zeros((2, 5), dtype=torch.long, device="meta")
    done = Cancelled(cancel)(ids, None)
    assert done.device == ids.device and done.shape == (2,) and done.dtype == torch.bool
    cpu = Cancelled(cancel)(torch.zeros((2, 5), dtype=torch.long), None)
    assert cpu.tolist() == [is_set, is_set]
