"""Each server's /metrics, read as its source defines it: pages recorded in tests/fixtures/metrics
(see its README), parsed and mapped, then carried through a run's counters into the speculation
rows. No HTTP: the engine's one scrape seam returns the recorded page."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from console.analysis.comparison.speculation import (
    NOT_SPECULATING,
    RUN_LEVEL,
    RUN_LEVEL_ITERATIONS,
    RUN_LEVEL_SAMPLED,
    speculation_rows,
)
from workers.engines.openai_http import OpenAIEngine
from workers.engines.openai_metrics import prometheus_kv_state, prometheus_parse, prometheus_spec_counters
from workers.replay.records import counters_delta

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
VLLM = (FIXTURES / "vllm_v1.txt").read_text()
SGLANG = (FIXTURES / "sglang.txt").read_text()
SGLANG_NO_SPEC = (FIXTURES / "sglang_no_spec.txt").read_text()
TRTLLM = json.loads((FIXTURES / "trtllm_iterations.json").read_text())
TRTLLM_NO_SPEC = json.loads((FIXTURES / "trtllm_iterations_no_spec.json").read_text())


class _Scripted(OpenAIEngine):
    """The engine with its scrape seam replaced by the pages a server would serve, in order."""

    def __init__(self, pages: list[str]):
        super().__init__()
        self.pages = list(pages)

    def _scrape(self, *, timeout_s: float) -> tuple[str | None, str | None]:
        return self.pages.pop(0), None


def _run(pages: list[str], *, samples: int) -> dict:
    """A run's counter deltas as the replay records them: counters(), ``samples`` KV reads, counters()."""
    engine = _Scripted(pages)
    before = engine.counters()
    for _ in range(samples):
        engine.kv_state()
    return counters_delta(before=before, after=engine.counters())


def _rows(candidate: dict | None, *, baseline: dict | None = None) -> dict[str, dict]:
    derived = pd.DataFrame({"arm": ["base", "spec"], "load": ["1x", "1x"], "run_id": [1, 2]})
    steps = pd.DataFrame({"row": [], "n_drafts": [], "drafted": [], "accepted": []}, dtype="int64")
    runs = pd.DataFrame({"run_id": [1, 2], "spec_counters": [baseline, candidate]})
    rows = speculation_rows(
        request_steps=steps, derived=derived, runs=runs, base_arm="base", speculative_arms={"spec"}
    )
    return {row["arm"]: row for row in rows}


def _sglang(page: str, *, length: float, rate: float = 0.5, throughput: float = 1843.5) -> str:
    """The recorded SGLang page with its spec gauges and decode throughput set."""
    out = []
    for line in page.splitlines():
        name = line.split("{", 1)[0]
        value = {
            "sglang:spec_accept_length": length,
            "sglang:spec_accept_rate": rate,
            "sglang:gen_throughput": throughput,
        }
        out.append(f"{line.rsplit(' ', 1)[0]} {value[name]}" if name in value else line)
    return "\n".join(out) + "\n"


def test_it_parses_a_vllm_v1_page_with_prometheus_clients_parser():
    counters = prometheus_spec_counters(text=VLLM)
    assert (counters["spec_decode_num_drafts"], counters["spec_decode_num_draft_tokens"]) == (8000, 32000)
    assert counters["spec_decode_num_accepted_tokens"] == 12480
    assert counters["spec_decode_num_accepted_tokens_per_pos"] == [5600, 3760, 2000, 1120]
    assert counters["server_rss_bytes"] == 2.14958336e9 and "metrics_error" not in counters
    assert prometheus_kv_state(text=VLLM) == {
        "kv_cache_usage_perc": 0.4125,
        "num_requests_running": 6,
        "num_requests_waiting": 2,
        "num_preemptions": 3,
        "kv_cache_tokens": 452608,
        "kv_blocks": 28288,
        "kv_cpu_blocks": None,
        "block_size": 16,
    }


def test_it_reads_sglangs_kv_gauges_and_spec_gauges_from_its_page():
    # The defect of issue 21: on this page the old reader found nothing at all.
    assert prometheus_kv_state(text=SGLANG) == {
        "kv_cache_usage_perc": 0.25,
        "num_requests_running": 12,
        "num_requests_waiting": 3,
        "kv_cache_tokens": 65536,
        "num_preemptions": 4,
        "spec_accept_length": 2.8,
        "spec_accept_rate": 0.56,
        "gen_throughput": 1843.5,
    }
    # SGLang has no spec-decode counter: nothing for before/after deltas, and no "not configured".
    counters = prometheus_spec_counters(text=SGLANG)
    assert "spec_decode_num_drafts" not in counters and "spec_decode" not in counters


def test_it_reads_one_figure_per_data_parallel_rank_and_sums_the_ranks():
    page = "\n".join(
        f'sglang:{name}{{dp_rank="{dp}",engine_type="unified",model_name="m",pp_rank="0",tp_rank="{tp}"}} {value}'
        for dp in (0, 1)
        for tp in (0, 1)
        for name, value in (("num_running_reqs", 4 + dp), ("token_usage", 0.2 + 0.2 * dp))
    )
    state = prometheus_kv_state(text=page + "\n")
    assert state["num_requests_running"] == 9  # 4 + 5: each rank's tp schedulers report one batch
    assert state["kv_cache_usage_perc"] == pytest.approx(0.3)


def test_it_samples_sglangs_acceptance_gauge_through_a_run():
    pages = [_sglang(SGLANG, length=1.9)]  # before the run: the last interval of the warm-up
    pages += [_sglang(SGLANG, length=v) for v in (2.6, 3.0, 2.8)]  # the sampler's reads
    pages += [_sglang(SGLANG, length=3.2)]  # after the run
    delta = _run(pages, samples=3)
    sampled = delta["spec_sampled"]
    assert sampled["acceptance_source"] == "sampled gauge"
    assert (sampled["samples"], sampled["samples_used"]) == (4, 4)
    assert sampled["mean_acceptance_length"] == pytest.approx((2.6 + 3.0 + 2.8 + 3.2) / 4)
    assert sampled["drafted_evidence"] is True and "spec_decode" not in sampled
    row = _rows(delta)["spec"]
    assert row["source"] == RUN_LEVEL_SAMPLED
    assert row["mean_acceptance_length"] == pytest.approx(2.9)
    assert row["drafts"] is None and row["acceptance_rate"] is None  # a gauge counts nothing
    assert row["drafted_evidence"] is True and row["did_not_speculate"] is False


def test_it_flags_a_candidate_that_never_speculated_on_sglang():
    delta = _run([SGLANG_NO_SPEC] * 4, samples=2)
    assert delta["spec_sampled"]["spec_decode"] == "not configured"
    row = _rows(delta)["spec"]
    assert row["source"] == RUN_LEVEL_SAMPLED and (row["drafts"], row["drafted"]) == (0, 0)
    assert row["drafted_evidence"] is False and row["did_not_speculate"] is True
    assert row["reason"].startswith(NOT_SPECULATING)


def test_it_does_not_read_sglangs_start_up_zero_as_a_server_that_does_not_speculate():
    # Before the first decode interval is logged the gauges hold 0 and gen_throughput is 0 too.
    fresh = _sglang(SGLANG, length=0.0, rate=0.0, throughput=0.0)
    delta = _run([fresh] * 3, samples=1)
    assert delta["spec_sampled"]["samples_used"] == 0
    row = _rows(delta)["spec"]
    assert row["source"] is None and row["did_not_speculate"] is False  # not measured


def test_it_sums_trtllms_iteration_statistics_polled_through_a_run():
    polls = [[], TRTLLM[:2], TRTLLM[2:], []]  # each poll returns the iterations since the last
    engine = _Scripted([json.dumps(p) for p in polls])
    before = engine.counters()
    assert engine.kv_state() == {
        "kv_blocks": 4096,
        "kv_cache_usage_perc": 68 / 4096,
        "block_size": 32,
        "kv_cache_tokens": 4096 * 32,
        "num_requests_running": 4,
        "num_requests_waiting": 0,
        "server_iterations": 2,
    }
    assert engine.kv_state()["kv_cache_usage_perc"] == 76 / 4096
    delta = counters_delta(before=before, after=engine.counters())
    assert delta["spec_decode_source"] == "summed iteration statistics"
    assert (delta["spec_decode_num_drafts"], delta["spec_decode_num_draft_tokens"]) == (12, 36)
    assert delta["spec_decode_num_accepted_tokens"] == 21 and delta["server_iterations"] == 4
    row = _rows(delta)["spec"]
    assert row["source"] == RUN_LEVEL_ITERATIONS
    assert row["acceptance_rate"] == pytest.approx(21 / 36)
    assert row["mean_acceptance_length"] == pytest.approx(1 + 21 / 12)  # the iterations' own 2.75, 3.25, 2.25
    assert row["drafted_evidence"] is True and row["did_not_speculate"] is False


def test_it_flags_a_candidate_that_never_speculated_on_trtllm():
    delta = _run([json.dumps(p) for p in ([], TRTLLM_NO_SPEC, [])], samples=1)
    assert delta["spec_decode_num_drafts"] == delta["spec_decode_num_draft_tokens"] == 0
    assert delta["spec_decode"] == "not configured"
    row = _rows(delta)["spec"]
    assert row["source"] == RUN_LEVEL_ITERATIONS and row["did_not_speculate"] is True


def test_it_reads_a_trtllm_run_that_polled_no_iteration_as_not_measured():
    # Zeros summed over nothing are no evidence (a server whose own collector drained the queue).
    delta = _run([json.dumps(TRTLLM_NO_SPEC), "[]", "[]"], samples=1)
    assert delta["server_iterations"] == 0
    assert _rows(delta)["spec"]["source"] is None


def test_it_keeps_what_a_malformed_page_said_before_the_bad_line():
    page = VLLM.replace("# HELP vllm:time_to_first_token_seconds", 'vllm:broken{engine="0" 1.0\n# HELP x', 1)
    samples, error = prometheus_parse(text=page)
    assert error and "not Prometheus text" in error and samples
    counters = prometheus_spec_counters(text=page)  # no exception
    assert counters["spec_decode_num_drafts"] == 8000 and "metrics_error" in counters
    # A vLLM page cut before its spec counters is not a server that does not speculate.
    cut = VLLM.replace("# HELP vllm:spec_decode_num_drafts_total", "vllm:broken{ 1\n# HELP y", 1)
    counters = prometheus_spec_counters(text=cut)
    assert "spec_decode" not in counters and "spec_decode_num_drafts" not in counters
    assert prometheus_kv_state(text=cut)["kv_cache_usage_perc"] == 0.4125
    assert _rows(counters_delta(before=counters, after=counters))["spec"]["source"] is None
    # TensorRT-LLM's JSON that does not parse: an error, and the run's sums are not trusted.
    delta = _run(["[]", "[{not json", json.dumps(TRTLLM)], samples=1)
    assert delta["server_polls_failed"] == 1 and "metrics_error" in delta
    assert _rows(delta)["spec"]["source"] is None


def test_it_keeps_vllms_counter_deltas_as_the_run_level_source():
    more = (
        VLLM.replace("} 8000.0", "} 8100.0")
        .replace("} 32000.0", "} 32400.0")
        .replace("} 12480.0", "} 12680.0")
    )
    row = _rows(_run([VLLM, VLLM, more], samples=1))["spec"]
    assert row["source"] == RUN_LEVEL and (row["drafts"], row["drafted"], row["accepted"]) == (100, 400, 200)
    assert row["drafted_evidence"] is True
