from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.experiments.matrix import arm_label, config_hash, load_levels_parse, run_order, sweep_expand


@given(arms=st.integers(1, 6), loads=st.integers(1, 4), repeats=st.integers(1, 4))
def test_it_runs_every_cell_once_per_repeat_in_balanced_blocks(arms, loads, repeats):
    order = run_order(arms=arms, loads=loads, repeats=repeats)
    assert len(order) == arms * loads * repeats
    assert Counter(order) == Counter(
        {(a, lv, r): 1 for a in range(arms) for lv in range(loads) for r in range(repeats)}
    )
    blocks = [order[i : i + arms] for i in range(0, len(order), arms)]
    for index, block in enumerate(blocks):
        arm_sequence = [a for a, _, _ in block]
        expected = list(range(arms)) if index % 2 == 0 else list(reversed(range(arms)))
        assert arm_sequence == expected
        assert len({(lv, r) for _, lv, r in block}) == 1


def test_it_interleaves_rather_than_running_one_arm_after_another():
    order = run_order(arms=3, loads=1, repeats=2)
    assert [a for a, _, _ in order] == [0, 1, 2, 2, 1, 0]


def test_it_parses_load_levels_with_caps():
    levels = load_levels_parse("0.5x, 1x,2x/c4,c8")
    assert [(lv.rate_multiplier, lv.concurrency) for lv in levels] == [
        (0.5, None),
        (1.0, None),
        (2.0, 4),
        (1.0, 8),
    ]


@pytest.mark.parametrize("bad", ["", "fast", "0x", "2x/c0", "1x,1x", "x2"])
def test_it_refuses_bad_load_levels(bad):
    with pytest.raises(ValueError):
        load_levels_parse(bad)


def test_it_expands_a_sweep_into_one_config_per_draft_length():
    configs = sweep_expand({"method": "ngram", "num_speculative_tokens": [2, 4], "prompt_lookup_max": 3})
    assert configs == [
        {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3},
        {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3},
    ]
    assert [arm_label(c) for c in configs] == ["ngram k=2", "ngram k=4"]
    with pytest.raises(ValueError):
        sweep_expand({"method": "ngram", "num_speculative_tokens": []})


def test_it_hashes_configs_by_content_not_key_order():
    a = config_hash(engine="hf", target_model="m", engine_args={"x": 1, "y": 2}, speculative_config=None)
    b = config_hash(engine="hf", target_model="m", engine_args={"y": 2, "x": 1}, speculative_config=None)
    c = config_hash(
        engine="hf", target_model="m", engine_args={"y": 2, "x": 1}, speculative_config={"method": "ngram"}
    )
    assert a == b != c
