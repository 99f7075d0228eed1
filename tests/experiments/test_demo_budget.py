"""The demo's time budget, against hand-computed cases (console/demo/budget.py)."""

from __future__ import annotations

import pytest

from console.demo.budget import (
    DemoBudget,
    RunBudget,
    budget_lines,
    budget_sum,
    run_budget,
    union_length,
)


def test_it_measures_a_union_of_overlapping_intervals():
    assert union_length([]) == 0
    assert union_length([(0, 2), (1, 3), (5, 6), (5.5, 5.8)]) == pytest.approx(4.0)
    assert union_length([(3, 1), (2, 2)]) == 0  # reversed and empty intervals count nothing


def test_a_one_at_a_time_engine_splits_into_prefill_decode_and_idle():
    # Window 10 s. Request A: sent 0, first token 1, done 3. Request B arrives at 2 and queues
    # behind A (its prefill starts at 3), first token 4, done 6. Nothing in flight 6..10.
    budget = run_budget(span_s=16.0, wall_s=10.0, load_s=2.5, requests=[(0, 1, 3), (2, 4, 6)])
    assert budget.prefill == pytest.approx(2.0)  # 0..1 and 3..4: B's queueing is A's decode
    assert budget.decode == pytest.approx(4.0)  # 1..3 and 4..6
    assert budget.idle == pytest.approx(4.0)
    assert budget.model_load == pytest.approx(2.5)
    assert budget.warmup == pytest.approx(16.0 - 10.0 - 2.5)
    assert budget.total == pytest.approx(16.0)


def test_requests_that_never_started_or_finished_count_nothing():
    budget = run_budget(
        span_s=None, wall_s=5.0, load_s=None, requests=[(0, None, None), (None, None, None), (1, 2, 3)]
    )
    assert (budget.prefill, budget.decode, budget.idle) == pytest.approx((1.0, 1.0, 3.0))
    assert budget.warmup == 0 and budget.model_load == 0


def test_the_printed_budget_adds_up_to_the_total():
    runs = budget_sum([RunBudget(1, 2, 3, 4, 5), RunBudget(1, 1, 1, 1, 1)])
    assert (runs.model_load, runs.warmup, runs.prefill, runs.decode, runs.idle) == (2, 3, 4, 5, 6)
    budget = DemoBudget(before_command=100.0, fetch=10.0, runs=runs, total=200.0, run_count=2)
    assert budget.other == pytest.approx(200 - 100 - 10 - 20)
    lines = budget_lines(budget)
    assert lines[0].split()[:5] == ["install", "(before", "the", "demo)", "100"]
    assert lines[-1].split() == ["total", "200", "s"]
    unknown = budget_lines(DemoBudget(before_command=None, fetch=0.0, runs=runs, total=30.0, run_count=2))
    assert "not measured" in unknown[0]
