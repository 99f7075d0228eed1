"""Did each candidate speculate: per-request steps first, the server's run-level counters when a
request recorded none, and the flag when a speculative arm drafted nothing at all."""

from __future__ import annotations

import pytest

from console.analysis.acceptance import server_acceptance, server_counters_sum
from console.analysis.comparison import comparison_compute
from console.analysis.comparison.speculation import NOT_SPECULATING, PER_REQUEST, RUN_LEVEL
from tests.analysis.builders import frame, request_row, runs_frame, server_counters


def _experiment(*, cand_steps=None, cand_counters=None, engine="openai", n=12):
    """A baseline run (1) and a candidate run (2) of ``n`` 4-token requests each."""
    rows = []
    for i in range(n):
        rows.append(request_row(run_id=1, request_id=f"r{i}", engine=engine))
        drafted, accepted = cand_steps or ([], [])
        rows.append(
            request_row(
                run_id=2,
                arm="spec",
                is_baseline=False,
                request_id=f"r{i}",
                engine=engine,
                drafted=list(drafted),
                accepted=list(accepted),
            )
        )
    runs = runs_frame(
        {"run_id": 1, "arm": "base", "load": "1x", "repeat": 0, "wall_s": 10.0, "spec_counters": None},
        {"run_id": 2, "arm": "spec", "load": "1x", "repeat": 0, "wall_s": 8.0, "spec_counters": cand_counters},
    )
    return frame(*rows), runs


def _speculation(requests, runs, *, speculative_arms=("spec",)):
    summary = comparison_compute(
        requests,
        runs,
        deadlines=None,
        cost_per_hour_usd=1.0,
        n_boot=50,
        speculative_arms=speculative_arms,
    )
    return {row["arm"]: row for row in summary["speculation"]}, summary


def test_it_sums_counter_deltas_over_runs_and_refuses_a_partial_sum():
    total = server_counters_sum([server_counters(3, 9, 5, [3, 2]), server_counters(1, 3, 1, [1, 0, 0])])
    assert total == {"drafts": 4, "drafted": 12, "accepted": 6, "accepted_per_pos": [4, 2, 0]}
    assert server_counters_sum([server_counters(3, 9, 5), {"metrics_error": "http://x/metrics: HTTP 404"}]) is None
    assert server_counters_sum([]) is None


def test_it_computes_run_level_acceptance_by_the_one_definition():
    got = server_acceptance({"drafts": 4, "drafted": 12, "accepted": 6, "accepted_per_pos": [4, 2, 0]})
    assert got["acceptance_rate"] == pytest.approx(6 / 12)
    assert got["mean_acceptance_length"] == pytest.approx(1 + 6 / 4)
    assert got["rate_per_draft_by_position"] == [1.0, 0.5, 0.0]


def test_it_uses_the_servers_counters_when_no_request_recorded_steps():
    requests, runs = _experiment(cand_counters=server_counters(24, 72, 36, [20, 12, 4]))
    rows, _ = _speculation(requests, runs)
    spec = rows["spec"]
    assert spec["source"] == RUN_LEVEL == "run-level (server counters)"
    assert (spec["drafts"], spec["drafted"], spec["accepted"]) == (24, 72, 36)
    assert spec["acceptance_rate"] == pytest.approx(0.5)
    assert spec["mean_acceptance_length"] == pytest.approx(2.5)
    assert spec["rate_per_draft_by_position"] == pytest.approx([20 / 24, 12 / 24, 4 / 24])
    assert spec["did_not_speculate"] is False and spec["reason"] is None
    assert rows["base"]["source"] is None  # a baseline without counters: nothing to say


def test_it_prefers_per_request_steps_and_keeps_the_counters_beside_them():
    # 4 tokens: the prefill's token, then steps accepting 1 and 0 (1 + 2 + 1 = 4 tokens).
    requests, runs = _experiment(cand_steps=([3, 3], [1, 0]), cand_counters=server_counters(24, 72, 12))
    rows, summary = _speculation(requests, runs)
    spec = rows["spec"]
    assert spec["source"] == PER_REQUEST
    assert (spec["drafts"], spec["drafted"], spec["accepted"]) == (24, 72, 12)
    assert spec["server"]["accepted"] == 12
    # The per-request acceptance tables say the same.
    by_task = next(r for r in summary["acceptance"]["by_task"] if r["arm"] == "spec")
    assert by_task["acceptance_rate"] == pytest.approx(spec["acceptance_rate"])


def test_it_flags_a_speculative_arm_whose_server_counters_show_no_draft():
    requests, runs = _experiment(cand_counters=server_counters(0, 0, 0) | {"spec_decode": "not configured"})
    rows, summary = _speculation(requests, runs)
    spec = rows["spec"]
    assert spec["did_not_speculate"] is True
    assert spec["reason"].startswith(NOT_SPECULATING) and "run-level (server counters)" in spec["reason"]
    assert any(note.startswith(NOT_SPECULATING) for note in summary["notes"])


def test_it_flags_a_speculative_arm_whose_steps_never_drafted():
    requests, runs = _experiment(cand_steps=([0, 0, 0], [0, 0, 0]), engine="hf")
    rows, _ = _speculation(requests, runs)
    assert rows["spec"]["source"] == PER_REQUEST and rows["spec"]["did_not_speculate"] is True


def test_it_flags_nothing_without_evidence_or_without_the_speculative_label():
    requests, runs = _experiment()  # no steps, no counters: not measured, not flagged
    rows, _ = _speculation(requests, runs)
    assert rows["spec"]["source"] is None and rows["spec"]["did_not_speculate"] is False
    requests, runs = _experiment(cand_counters=server_counters(0, 0, 0))
    rows, _ = _speculation(requests, runs, speculative_arms=())  # a candidate not configured to speculate
    assert rows["spec"]["speculative"] is False and rows["spec"]["did_not_speculate"] is False
    rows, _ = _speculation(requests, runs, speculative_arms=None)  # labels unknown (calibration)
    assert rows["spec"]["speculative"] is None and rows["spec"]["did_not_speculate"] is False


def test_it_counts_a_servers_per_request_totals_where_requests_sent_no_steps():
    # vLLM's summary level: 3 drafts of 3 tokens, 2 accepted, per request; 1 + 3 + 2 = 6 tokens
    # would be emitted but the request has 4: 2 accepted tokens were cut and are taken off.
    requests, runs = _experiment(cand_counters=server_counters(36, 108, 24))
    spec = requests["arm"] == "spec"
    requests["spec_totals"] = [
        {"drafts": 3, "draft_tokens": 9, "accepted": 2} if is_spec else None for is_spec in spec
    ]
    rows, summary = _speculation(requests, runs)
    assert rows["spec"]["source"] == PER_REQUEST
    assert (rows["spec"]["drafts"], rows["spec"]["drafted"], rows["spec"]["accepted"]) == (36, 108, 0)
    assert rows["spec"]["server"]["accepted"] == 24  # the raw counters stay as the server said
    by_task = next(r for r in summary["acceptance"]["by_task"] if r["arm"] == "spec")
    assert (by_task["drafts"], by_task["drafted"]) == (36, 108)
    # No steps: nothing per draft position or output position.
    assert not [r for r in summary["acceptance"]["by_position"] if r["arm"] == "spec"]


def test_it_takes_cut_tokens_off_a_per_request_total_like_off_a_last_step():
    from console.analysis.acceptance import request_totals_merge, steps_flatten, steps_per_request

    # Two steps of 3 accepting 3 and 2 would emit 1 + 4 + 3 = 8 tokens; 6 arrived: 2 were cut.
    by_steps = frame(request_row(engine="openai", num_output_tokens=6, drafted=[3, 3], accepted=[3, 2]))
    per_step = steps_per_request(steps_flatten(by_steps), n_rows=1)
    by_totals = frame(request_row(engine="openai", num_output_tokens=6, spec_totals={"drafts": 2, "draft_tokens": 6, "accepted": 5}))
    merged = request_totals_merge(steps_per_request(steps_flatten(by_totals), n_rows=1), by_totals)
    columns = ["n_steps", "n_drafts", "drafted", "accepted"]
    assert merged[columns].to_dict("records") == per_step[columns].to_dict("records") == [
        {"n_steps": 2, "n_drafts": 2, "drafted": 6, "accepted": 3}
    ]
