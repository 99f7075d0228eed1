import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.analysis.acceptance import (
    acceptance_aggregate,
    acceptance_by_position,
    steps_flatten,
    steps_per_request,
)
from console.analysis.cost import busy_seconds, cost_per_success, run_costs
from console.analysis.latency import metrics_aggregate
from console.analysis.metrics import gaps_flatten, requests_derive
from console.analysis.slices import bucket_assign, slices_assign
from tests.analysis.builders import frame, request_row, runs_frame

DEADLINES = {"interactive": {"e2e_s": 10, "ttft_s": 1}, "batch": {"e2e_s": 120}}


def test_it_derives_latency_of_a_chunked_stream():
    d = requests_derive(frame(request_row()), deadlines=DEADLINES).iloc[0]
    # scheduled 0, sent 0.1, first token 0.5, finish 1.1, 4 tokens in chunks of 1, 2, 1
    assert d["ttft_s"] == pytest.approx(0.5)  # 0.5 - 0
    assert d["ttft_from_send_s"] == pytest.approx(0.4)  # 0.5 - 0.1
    assert d["e2e_s"] == pytest.approx(1.1)
    assert d["tpot_s"] == pytest.approx(0.2)  # (1.1 - 0.5) / (4 - 1)
    assert d["itl_chunk_mean_s"] == pytest.approx(0.3)  # (1.1 - 0.5) / (3 chunks - 1)
    assert d["queue_s"] == pytest.approx(0.1)
    assert bool(d["completed"]) and bool(d["met_deadline"])


def test_it_splits_chunk_gaps_evenly_over_their_tokens():
    d = requests_derive(frame(request_row()), deadlines=DEADLINES)
    gaps = gaps_flatten(d)
    # chunk gaps: 0.8 - 0.5, 1.1 - 0.8
    assert gaps["chunk_gap_s"] == pytest.approx([0.3, 0.3])
    # the 2-token chunk after 0.3 s counts as two gaps of 0.15; the last chunk as one of 0.3
    assert sorted(gaps["token_gap_s"]) == pytest.approx([0.15, 0.15, 0.3])
    assert gaps["token_gap_s"].mean() == pytest.approx(d["tpot_s"].iloc[0])


def test_it_counts_extra_first_chunk_tokens_as_zero_gaps():
    row = request_row(chunk_times=[0.5, 0.9], chunk_tokens=[2, 2], finish_s=0.9)
    d = requests_derive(frame(row), deadlines=DEADLINES)
    gaps = gaps_flatten(d)
    # first chunk's second token: gap 0; the 2-token chunk after 0.4 s: two gaps of 0.2
    assert sorted(gaps["token_gap_s"]) == pytest.approx([0.0, 0.2, 0.2])
    assert d["tpot_s"].iloc[0] == pytest.approx(0.4 / 3)  # (0.9 - 0.5) / (4 - 1)
    assert gaps["token_gap_s"].mean() == pytest.approx(0.4 / 3)


def test_it_leaves_failed_requests_out_of_latency():
    row = request_row(error="engine died", first_token_s=0.5, finish_s=np.nan, finish_reason=None)
    d = requests_derive(frame(row), deadlines=DEADLINES).iloc[0]
    assert not d["completed"] and d["failed"]
    assert math.isnan(d["ttft_s"]) and math.isnan(d["e2e_s"]) and math.isnan(d["tpot_s"])
    assert not d["met_deadline"]
    assert d["output_tokens"] == 0
    gaps = gaps_flatten(requests_derive(frame(row), deadlines=DEADLINES))
    assert gaps["chunk_gap_s"].size == 0 and gaps["token_gap_s"].size == 0


def test_it_counts_an_error_string_as_failure_even_with_a_finish_time():
    d = requests_derive(frame(request_row(error="timeout")), deadlines=DEADLINES).iloc[0]
    assert not d["completed"]


def test_it_handles_a_request_with_zero_output_tokens():
    row = request_row(
        first_token_s=np.nan,
        finish_s=0.3,
        chunk_times=[],
        chunk_tokens=[],
        num_output_tokens=0,
        output_token_ids=[],
    )
    d = requests_derive(frame(row), deadlines=DEADLINES).iloc[0]
    assert d["completed"]
    assert d["e2e_s"] == pytest.approx(0.3)
    assert math.isnan(d["ttft_s"]) and math.isnan(d["tpot_s"]) and math.isnan(d["itl_chunk_mean_s"])
    # the finish (0.3 s) stands in for the first token against the 1 s TTFT deadline
    assert d["met_deadline"]
    strict = requests_derive(frame(row), deadlines={"interactive": {"ttft_s": 0.2}}).iloc[0]
    assert not strict["met_deadline"]  # 0.3 > 0.2


def test_it_has_no_tpot_for_a_single_token():
    row = request_row(chunk_times=[0.5], chunk_tokens=[1], num_output_tokens=1, finish_s=0.5)
    d = requests_derive(frame(row), deadlines=DEADLINES).iloc[0]
    assert d["ttft_s"] == pytest.approx(0.5)
    assert math.isnan(d["tpot_s"])


def test_it_applies_deadlines_per_class_and_treats_missing_keys_as_no_limit():
    rows = frame(
        request_row(request_id="slow-first", first_token_s=1.5, chunk_times=[1.5, 1.8, 2.1], finish_s=2.1),
        request_row(request_id="too-long", finish_s=10.5, chunk_times=[0.5, 5.0, 10.5]),
        request_row(
            request_id="batch", traffic_class="batch", first_token_s=5.0, chunk_times=[5.0, 6.0, 7.0]
        ),
        request_row(request_id="unknown-class", traffic_class="other", finish_s=500.0),
    )
    met = requests_derive(rows, deadlines=DEADLINES)["met_deadline"].tolist()
    # TTFT 1.5 > 1; e2e 10.5 > 10; batch has no TTFT limit and 7 < 120; no deadlines for "other"
    assert met == [False, False, True, True]


def _three_request_run():
    return frame(
        request_row(request_id="a", first_token_s=0.5, chunk_times=[0.5, 0.8, 1.1]),
        request_row(request_id="b", first_token_s=1.0, chunk_times=[1.0, 1.3, 1.6], finish_s=1.6),
        request_row(request_id="c", first_token_s=2.0, chunk_times=[2.0, 2.3, 2.6], finish_s=2.6),
        request_row(request_id="d", error="oom", first_token_s=np.nan, finish_s=np.nan, finish_reason=None),
    )


def test_it_aggregates_percentiles_and_throughput_per_run():
    d = requests_derive(_three_request_run(), deadlines=DEADLINES)
    runs = runs_frame({"run_id": 1, "arm": "base", "load": "1x", "repeat": 0, "wall_s": 10.0})
    agg = metrics_aggregate(d, runs, by=["run_id"], gaps=gaps_flatten(d)).iloc[0]
    # TTFT of completed requests: 0.5, 1.0, 2.0
    assert agg["ttft_s_p50"] == pytest.approx(1.0)
    assert agg["ttft_s_p90"] == pytest.approx(1.8)  # rank 0.9 * 2 = 1.8: 1.0 + 0.8 * (2.0 - 1.0)
    assert agg["ttft_s_mean"] == pytest.approx(3.5 / 3)
    assert agg["itl_chunk_s_p50"] == pytest.approx(0.3)  # every chunk gap is 0.3
    assert agg["n_requests"] == 4 and agg["n_completed"] == 3 and agg["n_failed"] == 1
    # met: a (TTFT 0.5) and b (TTFT 1.0 <= 1); c has TTFT 2.0 > 1
    assert agg["n_met_deadline"] == 2
    assert agg["completed_rps"] == pytest.approx(0.3)  # 3 / 10 s
    assert agg["goodput_rps"] == pytest.approx(0.2)  # 2 / 10 s
    assert agg["output_tokens_per_s"] == pytest.approx(1.2)  # 3 x 4 tokens / 10 s
    assert agg["deadline_attainment"] == pytest.approx(0.5)  # 2 / 4


def test_it_sums_wall_time_over_the_runs_of_a_group():
    one = _three_request_run()
    two = _three_request_run().assign(run_id=2, repeat=1)
    d = requests_derive(pd.concat([one, two], ignore_index=True), deadlines=DEADLINES)
    runs = runs_frame(
        {"run_id": 1, "arm": "base", "load": "1x", "repeat": 0, "wall_s": 10.0},
        {"run_id": 2, "arm": "base", "load": "1x", "repeat": 1, "wall_s": 30.0},
    )
    agg = metrics_aggregate(d, runs, by=["arm", "load"]).iloc[0]
    assert agg["n_runs"] == 2 and agg["wall_s"] == pytest.approx(40.0)
    assert agg["completed_rps"] == pytest.approx(6 / 40)


def _spec_request(**kw):
    return request_row(is_baseline=False, arm="spec", **kw)


def test_it_computes_acceptance_rate_and_tokens_per_pass():
    rows = frame(_spec_request(drafted=[3, 3, 3], accepted=[3, 0, 1], num_output_tokens=8))
    steps = steps_flatten(rows)
    acc = acceptance_aggregate(steps, rows, by=["arm"]).iloc[0]
    assert acc["acceptance_rate"] == pytest.approx(4 / 9)  # (3 + 0 + 1) / (3 + 3 + 3)
    assert acc["accepted_per_pass"] == pytest.approx(7 / 3)  # mean(4, 1, 2)
    assert acc["steps"] == 3


def test_it_computes_per_position_acceptance():
    rows = frame(_spec_request(drafted=[3, 3, 3], accepted=[3, 0, 1], num_output_tokens=8))
    pos = acceptance_by_position(steps_flatten(rows), rows, by=["arm"])
    # position j accepted iff a >= j: j=1 in steps a=3 and a=1; j=2 and j=3 only in a=3
    assert pos["proposed"].tolist() == [3, 3, 3]
    assert pos["accepted"].tolist() == [2, 1, 1]
    assert pos["rate"].tolist() == pytest.approx([2 / 3, 1 / 3, 1 / 3])


def test_it_places_steps_at_their_output_position():
    rows = frame(_spec_request(drafted=[2, 2], accepted=[2, 2], num_output_tokens=20))
    steps = steps_flatten(rows)
    # steps emit 3 + 3 = 6 tokens, the last 6 of 20: the first step starts at 14, the second at 17
    assert steps["output_position"].tolist() == [14, 17]
    acc = acceptance_aggregate(steps, rows, by=["arm", "position_bucket"])
    assert acc["position_bucket"].tolist() == ["0-16", "16-32"]


def test_it_reports_no_rate_when_nothing_was_drafted():
    rows = frame(_spec_request(drafted=[0, 0], accepted=[0, 0], num_output_tokens=3))
    acc = acceptance_aggregate(steps_flatten(rows), rows, by=["arm"]).iloc[0]
    assert math.isnan(acc["acceptance_rate"])
    assert acc["accepted_per_pass"] == pytest.approx(1.0)


def test_it_rejects_inconsistent_step_counts():
    with pytest.raises(ValueError, match="lengths differ"):
        steps_flatten(frame(_spec_request(drafted=[3, 3], accepted=[1])))
    with pytest.raises(ValueError, match="outside"):
        steps_flatten(frame(_spec_request(drafted=[2], accepted=[3])))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(0, 6).flatmap(lambda k: st.tuples(st.just(k), st.integers(0, k))), max_size=8),
        min_size=1,
        max_size=6,
    )
)
def test_it_keeps_per_position_counts_summing_to_the_totals(requests_steps):
    rows = frame(
        *[
            _spec_request(
                request_id=f"r{i}",
                drafted=[k for k, _ in s],
                accepted=[a for _, a in s],
                num_output_tokens=sum(a + 1 for _, a in s),
            )
            for i, s in enumerate(requests_steps)
        ]
    )
    steps = steps_flatten(rows)
    pos = acceptance_by_position(steps, rows, by=["arm"])
    # sum over j of #(k >= j) is sum of k; likewise for a
    assert pos["proposed"].sum() == steps["drafted"].sum()
    assert pos["accepted"].sum() == steps["accepted"].sum()
    if not steps.empty:
        by_bucket = acceptance_aggregate(steps, rows, by=["arm", "position_bucket"])
        assert by_bucket["steps"].sum() == len(steps)
        assert (steps["output_position"] >= 0).all()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.001, 2.0), st.integers(1, 5)),
        min_size=1,
        max_size=12,
    )
)
def test_it_keeps_token_gaps_summing_to_the_stream_duration(chunks):
    times = list(np.cumsum([0.5] + [g for g, _ in chunks[1:]]))
    tokens = [n for _, n in chunks]
    row = request_row(
        chunk_times=times, chunk_tokens=tokens, num_output_tokens=sum(tokens), finish_s=times[-1]
    )
    d = requests_derive(frame(row), deadlines=None)
    gaps = gaps_flatten(d)
    assert gaps["token_gap_s"].size == sum(tokens) - 1
    assert gaps["token_gap_s"].sum() == pytest.approx(times[-1] - times[0])
    assert gaps["chunk_gap_s"].size == len(times) - 1
    assert (np.diff(gaps["token_row"]) >= 0).all() and (np.diff(gaps["chunk_row"]) >= 0).all()


def test_it_prices_runs_with_energy_and_counts_successes():
    rows = _three_request_run()
    d = requests_derive(rows, deadlines=DEADLINES)
    runs = runs_frame(
        {"run_id": 1, "arm": "base", "load": "1x", "repeat": 0, "wall_s": 3600.0, "accelerator_count": 2}
        | {"energy_j": 3.6e6}
    )
    cost = run_costs(runs, d, cost_per_hour_usd=3.0, power_price_usd_per_kwh=0.5).iloc[0]
    # busy from the first send (0.1) to the last finish (2.6), not the 3600 s replay window
    assert cost["busy_s"] == pytest.approx(2.5)
    hours = 2.5 / 3600 * 2  # x 2 accelerators
    assert cost["accelerator_hours"] == pytest.approx(hours)
    assert cost["cost_usd"] == pytest.approx(hours * 3 + 0.5)  # + 1 kWh x 0.5 USD
    assert cost["successes"] == 2  # a and b: c missed its TTFT deadline, d failed
    out = cost_per_success(cost["cost_usd"], cost["successes"], cost["output_tokens"])
    assert out["cost_per_success_usd"] == pytest.approx((hours * 3 + 0.5) / 2)
    assert out["cost_per_million_output_tokens_usd"] == pytest.approx(
        (hours * 3 + 0.5) / 12 * 1e6
    )  # 3 completed x 4 tokens


def _intervals(*spans, run_id=1):
    return frame(
        *(
            request_row(run_id=run_id, request_id=f"r{run_id}-{i}", sent_s=s, first_token_s=s, finish_s=f)
            for i, (s, f) in enumerate(spans)
        )
    )


def test_it_counts_overlapping_requests_once_and_gaps_not_at_all():
    # [0, 2] and [1, 3] overlap: 3 s; idle from 3 to 10; [10, 11] inside [10, 12]: 2 s
    busy = busy_seconds(_intervals((0.0, 2.0), (1.0, 3.0), (10.0, 12.0), (10.0, 11.0)))
    assert busy.loc[1] == pytest.approx(5.0)


def test_it_measures_busy_time_per_run():
    rows = pd.concat([_intervals((0.0, 1.0), run_id=1), _intervals((5.0, 9.0), (0.0, 1.0), run_id=2)])
    busy = busy_seconds(rows)
    assert busy.loc[1] == pytest.approx(1.0)
    assert busy.loc[2] == pytest.approx(5.0)  # [0, 1] and [5, 9], unsorted


def test_it_counts_a_failed_request_until_it_ended():
    rows = _intervals((0.0, 1.0), (4.0, 6.0))
    rows.loc[1, ["error", "finish_reason", "first_token_s"]] = ["engine died", None, np.nan]
    assert busy_seconds(rows).loc[1] == pytest.approx(3.0)  # the engine worked on it from 4 to 6
    rows.loc[1, "finish_s"] = np.nan  # no end stored: it adds nothing
    assert busy_seconds(rows).loc[1] == pytest.approx(1.0)


def test_it_gives_zero_busy_time_when_nothing_was_sent():
    rows = _intervals((0.0, 1.0))
    rows["sent_s"] = np.nan
    assert busy_seconds(rows).loc[1] == 0.0
    runs = runs_frame({"run_id": 1, "arm": "base", "load": "1x", "repeat": 0, "wall_s": 30.0})
    cost = run_costs(runs, requests_derive(rows, deadlines=None), cost_per_hour_usd=3.0).iloc[0]
    assert cost["busy_s"] == 0.0 and cost["accelerator_hours"] == 0.0


def test_it_prices_on_busy_time_whatever_the_replay_window():
    d = requests_derive(_intervals((0.0, 1800.0)), deadlines=None)
    short = runs_frame({"run_id": 1, "arm": "base", "load": "1x", "repeat": 0, "wall_s": 1800.0})
    long = runs_frame({"run_id": 1, "arm": "base", "load": "1x", "repeat": 0, "wall_s": 7200.0})
    for runs in (short, long):
        assert run_costs(runs, d, cost_per_hour_usd=2.0).iloc[0]["cost_usd"] == pytest.approx(1.0)


def test_it_excludes_invalid_outputs_from_successes():
    d = requests_derive(_three_request_run(), deadlines=DEADLINES)
    d["output_valid"] = [False, True, True, True]
    runs = runs_frame({"run_id": 1, "arm": "base", "load": "1x", "repeat": 0, "wall_s": 3600.0})
    assert run_costs(runs, d, cost_per_hour_usd=1.0).iloc[0]["successes"] == 1


def test_it_guards_cost_per_success_without_successes():
    out = cost_per_success(5.0, 0, 0)
    assert out["cost_per_success_usd"] == math.inf
    assert out["cost_per_success_reason"] == "no successful requests"
    assert out["cost_per_million_output_tokens_reason"] == "no output tokens"


def test_it_skips_energy_cost_when_energy_was_not_measured():
    d = requests_derive(_three_request_run(), deadlines=DEADLINES)
    runs = runs_frame({"run_id": 1, "arm": "base", "load": "1x", "repeat": 0, "wall_s": 3600.0})
    cost = run_costs(runs, d, cost_per_hour_usd=3.0, power_price_usd_per_kwh=0.5).iloc[0]
    assert cost["cost_usd"] == pytest.approx(2.5 / 3600 * 3.0)  # busy 2.5 s, no energy term
    assert not cost["energy_cost_included"]


def test_it_buckets_lengths_with_half_open_edges():
    labels = bucket_assign(np.array([0, 255, 256, 5000, np.nan]), edges=(0, 256, 1024, 4096))
    assert labels.tolist() == ["0-256", "0-256", "256-1024", "4096+", None]


def test_it_slices_output_length_by_the_baselines_answer():
    rows = frame(
        request_row(num_output_tokens=10),
        request_row(arm="spec", is_baseline=False, run_id=2, num_output_tokens=300),
    )
    sliced = slices_assign(rows)
    # both arms land in the baseline's bucket (10 tokens), so the slice stays paired
    assert sliced["output_bucket"].tolist() == ["0-32", "0-32"]
    assert sliced["prompt_bucket"].tolist() == ["0-256", "0-256"]


def test_it_aggregates_acceptance_the_same_from_per_request_sums():
    rows = frame(
        _spec_request(
            request_id="a", drafted=[3, 3, 3], accepted=[3, 0, 1], num_output_tokens=8, task="code"
        ),
        _spec_request(request_id="b", drafted=[2], accepted=[1], num_output_tokens=3, task="chat"),
        _spec_request(request_id="c", drafted=[4, 4], accepted=[0, 4], num_output_tokens=7, task="code"),
    )
    steps = steps_flatten(rows)
    direct = acceptance_aggregate(steps, rows, by=["task"])
    summed = acceptance_aggregate(steps_per_request(steps, n_rows=len(rows)), rows, by=["task"])
    pd.testing.assert_frame_equal(direct, summed)
    code = direct.set_index("task").loc["code"]
    assert code["acceptance_rate"] == pytest.approx(8 / 17)  # (3 + 0 + 1 + 0 + 4) / (9 + 8)
    assert code["accepted_per_pass"] == pytest.approx(13 / 5)  # (8 accepted + 5 steps) / 5 steps


def test_it_counts_a_draft_cut_by_max_tokens_the_same_way_on_every_engine():
    # Two steps of k=4, the second cut after its bonus token by max_tokens. hf records what was
    # emitted (a = 3, then 0; 5 tokens); vLLM counts the verified matches (3, 3) and its first
    # token comes from the prefill (1 + 4 + 1 = 6 tokens).
    rows = frame(
        request_row(request_id="hf", engine="hf", num_output_tokens=5, drafted=[4, 4], accepted=[3, 0]),
        request_row(request_id="vllm", engine="vllm", num_output_tokens=6, drafted=[4, 4], accepted=[3, 3]),
    )
    steps = steps_flatten(rows)
    assert steps.groupby("row")["accepted"].apply(list).tolist() == [[3, 0], [3, 0]]
    assert steps.groupby("row")["drafted"].apply(list).tolist() == [[4, 4], [4, 4]]
