"""Evidence that a speculative arm drafted, and that it drafted what its config says: a
speculative arm without any acceptance evidence is marked, one whose steps or counters draft
more than its configured k (or whose baseline drafted at all) is flagged ``config_mismatch``."""

from __future__ import annotations

from console.analysis.comparison import comparison_compute
from console.analysis.comparison.draft_checks import MIN_STEPS_FOR_K, config_mismatch_reason
from tests.analysis.builders import frame, request_row, runs_frame, server_counters

NGRAM_K4 = {"method": "ngram", "num_speculative_tokens": 4}


def _rows(*, cand_steps=None, cand_counters=None, base_steps=None, configs=None, n=8):
    """Speculation rows by arm: a baseline run (1) and a candidate run (2), ``n`` 4-token requests."""
    rows = []
    for i in range(n):
        b_drafted, b_accepted = base_steps or ([], [])
        rows.append(request_row(run_id=1, request_id=f"r{i}", engine="openai", drafted=list(b_drafted), accepted=list(b_accepted)))
        drafted, accepted = cand_steps or ([], [])
        rows.append(
            request_row(
                run_id=2, arm="spec", is_baseline=False, request_id=f"r{i}", engine="openai",
                drafted=list(drafted), accepted=list(accepted),
            )
        )
    runs = runs_frame(
        {"run_id": 1, "arm": "base", "load": "1x", "repeat": 0, "wall_s": 10.0, "spec_counters": None},
        {"run_id": 2, "arm": "spec", "load": "1x", "repeat": 0, "wall_s": 8.0, "spec_counters": cand_counters},
    )
    summary = comparison_compute(
        frame(*rows), runs, deadlines=None, cost_per_hour_usd=1.0, n_boot=20,
        speculative_arms=("spec",), speculative_configs={"spec": configs if configs is not None else NGRAM_K4},
    )
    return {row["arm"]: row for row in summary["speculation"]}, summary


def test_it_marks_a_speculative_arm_without_any_drafting_evidence():
    rows, summary = _rows()  # no steps, no counters: a server without spec counters, metrics off
    spec = rows["spec"]
    assert spec["source"] is None and spec["no_evidence"] is True and spec["did_not_speculate"] is False
    assert "spec" in spec["reason"] and "1x" in spec["reason"]
    assert "--per-request-spec-decode-metrics" in spec["reason"] and "/metrics" in spec["reason"]
    assert rows["base"]["no_evidence"] is False  # a baseline needs no drafting evidence
    assert spec["reason"] in summary["notes"]


def test_it_flags_a_step_that_drafted_more_than_the_configured_k():
    # 4 tokens: the prefill's token, then a step drafting 7 accepting 1, one drafting 3 accepting 0.
    rows, summary = _rows(cand_steps=([7, 3], [1, 0]))
    spec = rows["spec"]
    assert spec["config_mismatch"] is True and spec["max_drafted_per_step"] == 7
    assert "7" in spec["reason"] and "num_speculative_tokens 4" in spec["reason"]
    assert spec["reason"] in summary["notes"]


def test_it_flags_server_counters_drafting_more_per_draft_than_k():
    rows, _ = _rows(cand_counters=server_counters(24, 24 * 6, 30))
    assert rows["spec"]["config_mismatch"] is True and "6.00 tokens per draft" in rows["spec"]["reason"]
    rows, _ = _rows(cand_counters=server_counters(24, 24 * 4, 30, [10, 8, 6, 4, 2, 0]))
    assert rows["spec"]["config_mismatch"] is True and "6 draft positions" in rows["spec"]["reason"]


def test_it_does_not_flag_an_ngram_arm_that_drafted_fewer_than_k():
    rows, _ = _rows(cand_steps=([4, 2], [1, 1]))  # short matches propose fewer: not evidence
    assert rows["spec"]["config_mismatch"] is False and rows["spec"]["reason"] is None
    rows, _ = _rows(cand_counters=server_counters(24, 24 * 3, 30, [10, 8, 6]))
    assert rows["spec"]["config_mismatch"] is False


def test_it_flags_a_baseline_that_drafted():
    rows, _ = _rows(cand_steps=([4, 2], [1, 1]), base_steps=([4, 2], [1, 1]))
    assert rows["base"]["config_mismatch"] is True and "not to speculate" in rows["base"]["reason"]


def test_it_reads_many_steps_that_never_reached_k_as_another_k():
    few = config_mismatch_reason(arm="a", load="1x", config=NGRAM_K4, speculative=True, evidence={
        "source": "per-request", "max_drafted": 3, "n_draft_steps": MIN_STEPS_FOR_K - 1, "drafts": 10, "drafted": 30})
    many = config_mismatch_reason(arm="a", load="1x", config=NGRAM_K4, speculative=True, evidence={
        "source": "per-request", "max_drafted": 3, "n_draft_steps": MIN_STEPS_FOR_K, "drafts": 10, "drafted": 30})
    assert few is None and many is not None and "never drafted 4" in many
    # transformers' confidence schedule stops drafting early by design; its heuristic one grows past k
    dynamic = {"method": "draft_model", "num_speculative_tokens": 4, "draft_length_schedule": "dynamic"}
    heuristic = dynamic | {"draft_length_schedule": "heuristic"}
    evidence = {"source": "per-request", "max_drafted": 3, "n_draft_steps": 500, "drafts": 10, "drafted": 30}
    assert config_mismatch_reason(arm="a", load="1x", config=dynamic, speculative=True, evidence=evidence) is None
    grown = evidence | {"max_drafted": 8, "drafted": 80}
    assert config_mismatch_reason(arm="a", load="1x", config=heuristic, speculative=True, evidence=grown) is None
    assert config_mismatch_reason(arm="a", load="1x", config=dynamic, speculative=True, evidence=grown) is not None
