"""The fit assessment's verdicts on hand-built inputs (pure functions: console.analysis.fit_assessment, fit_conditions, fit_stats)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from console.analysis import fit_assessment, fit_conditions, fit_proposers, fit_stats
from console.analysis.metrics import requests_derive
from tests.analysis.builders import request_row

CATALOG = {
    "qwen2.5-coder-1.5b": {"family": "qwen2", "size_bytes": 1_100},
    "qwen2.5-coder-0.5b": {"family": "qwen2", "size_bytes": 490},
    "smollm2-135m": {"family": "smollm2", "size_bytes": 98},
}
LEVELS = [{"label": "1x", "rate_multiplier": 1.0, "concurrency": None}, {"label": "2x", "rate_multiplier": 2.0}]


def trace(*, classes=None, limits=(128, 128, 16, 200), recorded=None, rate=2.0) -> dict:
    return {
        "classes": {"interactive": 3, "batch": 1} if classes is None else classes,
        "rate_rps": rate,
        "output_limits": list(limits),
        "recorded_output_tokens": list(recorded) if recorded is not None else [None] * len(limits),
    }


def run_stats(**over) -> dict:
    """One baseline run's cached fit facts, as run_fit_stats leaves them."""
    base = {
        "version": fit_stats.FIT_VERSION,
        "load": "2x",
        "rate_multiplier": 2.0,
        "concurrency_cap": None,
        "repeat": 0,
        "n_requests": 4,
        "n_completed": 4,
        "output_tokens": [100, 90, 80, 10],
        "generation_share": {"interactive": [0.8, 0.9, 0.7], "batch": [0.2]},
        "external_time": False,
        "offered_rps": 4.0,
        "inflight_mean": 2.0,
        "inflight_max": 3,
        "quality": {"json_schema": [10, 10], "tool_call": [0, 0], "reference_answer": [0, 0]},
        "gpu_count": 1,
        "gpu_util_pct": 40.0,
        "gpu_peak_memory_bytes": 10.0,
        "gpu_memory_bytes": 100,
        "kv_cache_usage": None,
        "preemptions": None,
    }
    return base | over


def assess(*, runs=(), target="qwen2.5-coder-1.5b", engine="hf", specs=None, tr=None) -> dict:
    result = fit_assessment.fit_assess(
        trace=tr or trace(),
        engine=engine,
        target_model=target,
        specs=specs if specs is not None else [{"method": "ngram", "num_speculative_tokens": 4}],
        load_levels=LEVELS,
        runs=list(runs),
        catalog=CATALOG,
    )
    return result


def cond(result: dict, name: str) -> dict:
    return next(c for c in result["conditions"] if c["name"] == name)


def test_it_judges_every_condition_before_any_run_from_the_trace_and_configs():
    result = assess()
    assert [c["name"] for c in result["conditions"]] == [n for n, _ in fit_conditions.CONDITIONS]
    assert result["stage"] == "before any run" and result["generation_share"] == []
    quality = cond(result, "quality_bar")
    assert quality["verdict"] == "unknown" and "has not run" in quality["reason"]
    serving = cond(result, "serving_headroom")
    assert serving["verdict"] == "unknown" and "telemetry" in serving["reason"]
    length = cond(result, "output_length")
    # limits 128, 128, 16, 200: three of four reach 64 tokens.
    assert length["numbers"]["source"] == "output limits" and length["numbers"]["share_at_least_min"] == 0.75
    assert length["verdict"] == "likely" and "upper bounds" in length["reason"]
    traffic = cond(result, "interactive_traffic")
    assert traffic["verdict"] == "likely" and traffic["numbers"]["interactive_share"] == 0.75
    assert [lv["offered_rps"] for lv in traffic["numbers"]["loads"]] == [2.0, 4.0]


def test_it_prefers_recorded_output_lengths_and_says_so():
    result = assess(tr=trace(limits=(128, 128, 128, 128), recorded=(10, 20, 30, 128)))
    length = cond(result, "output_length")
    assert length["numbers"]["source"] == "recorded output lengths"
    assert length["numbers"]["share_at_least_min"] == 0.25 and length["verdict"] == "unlikely"
    mixed = cond(assess(tr=trace(limits=(128, 8), recorded=(100, None), classes={"interactive": 2})), "output_length")
    assert mixed["numbers"]["source"].startswith("recorded output lengths (1 of 2)")


def test_it_refines_output_length_with_the_baselines_outputs():
    result = assess(runs=[run_stats(output_tokens=[5, 6, 7, 70])])
    length = cond(result, "output_length")
    assert length["numbers"]["source"] == "baseline outputs" and length["verdict"] == "unlikely"
    assert length["numbers"]["median_tokens"] == 6.5


@pytest.mark.parametrize(
    ("checks", "verdict", "words"),
    [
        ({"json_schema": [10, 10]}, "likely", "10 of 10"),
        ({"json_schema": [10, 5], "reference_answer": [10, 9]}, "unlikely", "14 of 20"),
        ({"json_schema": [0, 0]}, "unknown", "nothing is gradable"),
    ],
)
def test_it_judges_the_quality_bar_on_the_baselines_gradable_outputs(checks, verdict, words):
    quality = cond(assess(runs=[run_stats(quality=checks)]), "quality_bar")
    assert quality["verdict"] == verdict and words in quality["reason"]


@pytest.mark.parametrize(
    ("over", "verdict", "words"),
    [
        ({"gpu_util_pct": 40.0}, "likely", "40%"),
        ({"gpu_util_pct": 95.0}, "unlikely", "compute-saturated"),
        ({"gpu_util_pct": 40.0, "kv_cache_usage": 0.95}, "unlikely", "KV cache is full"),
        ({"gpu_util_pct": None, "gpu_count": 0}, "unknown", "ran on CPU"),
    ],
)
def test_it_judges_serving_headroom_at_the_heaviest_load(over, verdict, words):
    runs = [run_stats(load="1x", gpu_util_pct=10.0), run_stats(**over)]
    serving = cond(assess(runs=runs), "serving_headroom")
    assert serving["verdict"] == verdict and words in serving["reason"]
    assert serving["numbers"]["judged_at"] == "2x"


def test_it_judges_traffic_by_class_mix_and_measured_concurrency():
    batchy = cond(assess(tr=trace(classes={"interactive": 1, "batch": 3})), "interactive_traffic")
    assert batchy["verdict"] == "unlikely" and "25%" in batchy["reason"]
    busy = cond(assess(runs=[run_stats(inflight_mean=40.0, inflight_max=64)]), "interactive_traffic")
    assert busy["verdict"] == "unlikely" and "40.0 requests in flight" in busy["reason"]
    calm = cond(assess(runs=[run_stats(inflight_mean=2.0)]), "interactive_traffic")
    assert calm["verdict"] == "likely"
    row = next(lv for lv in calm["numbers"]["loads"] if lv["load"] == "2x")
    assert row["measured_offered_rps"] == 4.0 and row["inflight_max"] == 3
    empty = cond(assess(tr=trace(classes={}, limits=())), "interactive_traffic")
    assert empty["verdict"] == "unknown"


def test_it_names_the_proposers_this_engine_and_target_have():
    likely = cond(assess(), "proposer")
    names = {p["proposer"]: p for p in likely["numbers"]["proposers"]}
    assert likely["verdict"] == "likely" and set(names) == {"ngram", "suffix", "qwen2.5-coder-0.5b"}
    assert names["ngram"]["configured"] and names["qwen2.5-coder-0.5b"]["source"] == "model catalog"
    assert names["suffix"]["source"].startswith("not on this engine")  # suffix decoding is vLLM's
    assert (
        "copy from the prompt" in names["ngram"]["suits"]
        and "general text" in names["qwen2.5-coder-0.5b"]["suits"]
    )
    cross = cond(
        assess(target="smollm2-135m", specs=[{"method": "draft_model", "model": "qwen2.5-coder-0.5b"}]),
        "proposer",
    )
    assert cross["verdict"] == "unknown" and "suffix" not in cross["reason"]  # not on hf
    assert "n-gram (prompt lookup) is available whatever the target" in cross["reason"]
    draft = next(p for p in cross["numbers"]["proposers"] if p["proposer"] == "qwen2.5-coder-0.5b")
    assert "cross-vocabulary" in draft["kind"] and "greedy-only" in draft["note"]
    unknown = cond(
        assess(
            target="meta-llama/Llama-3.1-8B", engine="vllm", specs=[{"method": "draft_model", "model": "x/y"}]
        ),
        "proposer",
    )
    assert unknown["verdict"] == "unknown" and "does not know" in unknown["reason"]
    assert "n-gram (prompt lookup) and suffix decoding are available whatever the target" in unknown["reason"]
    eagle = cond(
        assess(target="meta-llama/Llama-3.1-8B", engine="vllm", specs=[{"method": "eagle3"}]), "proposer"
    )
    assert eagle["verdict"] == "likely" and any(
        p["kind"] == "EAGLE3 head" for p in eagle["numbers"]["proposers"]
    )


@pytest.mark.parametrize("engine", ["hf", "vllm", "openai"])
@pytest.mark.parametrize(
    "target", ["qwen2.5-coder-1.5b", "smollm2-135m", "meta-llama/Llama-3.1-8B", "synthetic"]
)
def test_an_ngram_candidate_never_reads_unlikely_for_the_proposer(engine, target):
    specs = [
        {"method": "ngram", "num_speculative_tokens": 4},
        {"method": "draft_model", "model": "qwen2.5-coder-0.5b"},
    ]
    proposer = cond(assess(target=target, engine=engine, specs=specs), "proposer")
    assert proposer["verdict"] == "likely"
    if target in (
        "smollm2-135m",
        "meta-llama/Llama-3.1-8B",
        "synthetic",
    ):  # no same-tokenizer draft: n-gram's turn
        assert "needs no model, so it exists whatever the target" in proposer["reason"]
        assert "outputs that copy from the prompt (code edits, RAG, summarisation)" in proposer["reason"]


def test_suffix_decoding_is_a_proposer_whatever_the_target_on_vllm():
    proposer = cond(
        assess(target="meta-llama/Llama-3.1-8B", engine="vllm", specs=[{"method": "suffix"}]), "proposer"
    )
    suffix = next(p for p in proposer["numbers"]["proposers"] if p["proposer"] == "suffix")
    assert proposer["verdict"] == "likely" and suffix["source"] == "always available" and suffix["configured"]
    assert "repeat earlier outputs" in proposer["reason"]
    lines = fit_assessment.numbers_lines("proposer", proposer["numbers"])
    assert (
        "suffix: suffix decoding (always available, configured; needs no model); suits repetitive" in lines[1]
    )


# --- drafter acceptance high enough: break-even k*c + 1 tokens per target pass ----------------


def headline(arm, load, *, tpot, tpp=None) -> dict:
    return {"arm": arm, "load": load, "tpot_s_mean": tpot, "tokens_per_pass": tpp}


def evidence(arm, load, *, source="per-request", drafts=100, drafted=400, accepted=200, length=None) -> dict:
    rate = accepted / drafted if drafted else None
    return {"arm": arm, "load": load, "source": source, "drafts": drafts, "drafted": drafted, "accepted": accepted,
            "acceptance_rate": rate, "mean_acceptance_length": length}  # fmt: skip


def drafter(*, heads=(), spec=(), configs=None, target="qwen2.5-coder-1.5b") -> dict:
    candidates = fit_stats.candidate_fit_stats(
        headline=list(heads), speculation=list(spec), configs=configs or {}, baseline_arm="baseline"
    )
    result = fit_assessment.fit_assess(
        trace=trace(), engine="vllm", target_model=target, specs=[c for c in (configs or {}).values() if c],
        load_levels=LEVELS, runs=[], catalog=CATALOG, candidates=candidates,
    )  # fmt: skip
    return cond(result, "drafter_acceptance")


NGRAM4 = {"method": "ngram", "num_speculative_tokens": 4}
DRAFT4 = {"method": "draft_model", "model": "qwen2.5-coder-0.5b", "num_speculative_tokens": 4}


def test_a_drafter_pays_when_its_tokens_per_pass_beat_k_c_plus_one():
    # 2x: the candidate's 12 ms per token x 2.0 tokens per pass = 24 ms per pass against the
    # baseline's 20 ms per token: 1.2 target steps per pass, so c = (1.2 - 1) / 4 = 0.05 and it
    # needs more than 4 x 0.05 + 1 = 1.2 tokens per pass; it gets 2.0. At 1x it would need more.
    heads = [headline("baseline", "1x", tpot=0.010), headline("baseline", "2x", tpot=0.020),
             headline("ngram k=4", "1x", tpot=0.030, tpp=1.5), headline("ngram k=4", "2x", tpot=0.012, tpp=2.0)]  # fmt: skip
    spec = [evidence("ngram k=4", "1x"), evidence("ngram k=4", "2x")]
    result = drafter(heads=heads, spec=spec, configs={"baseline": None, "ngram k=4": NGRAM4})
    assert result["verdict"] == "likely" and result["numbers"]["judged_at"] == "2x"
    (row,) = result["numbers"]["candidates"]
    assert row["load"] == "2x" and row["k"] == 4.0 and row["c"] == pytest.approx(0.05)
    assert row["c_source"].startswith("measured")
    assert (
        row["needed_tokens_per_pass"] == pytest.approx(1.2) and row["tokens_per_pass"] == 2.0 and row["pays"]
    )
    assert row["alpha"] == 0.5 and row["expected_tokens_per_pass"] == pytest.approx(
        1.9375
    )  # (1 - 0.5^5) / 0.5
    # Break-even acceptance: 1 + a + a^2 + a^3 + a^4 = 1.2 at a = 0.1668 (1 + .1668 + .0278 + .0046
    # + .0008 = 1.2000).
    assert row["alpha_needed"] == pytest.approx(0.1668, abs=1e-4)
    assert fit_proposers.tokens_per_verification(row["alpha_needed"], 4) == pytest.approx(1.2)
    assert (
        "2.00 tokens per target pass, needs more than 1.20 tokens (k 4.00 × c 0.0500 + 1)" in result["reason"]
    )
    lines = fit_assessment.numbers_lines("drafter_acceptance", result["numbers"])
    assert lines[0] == "judged at load 2x"
    assert lines[1] == (
        "ngram k=4 at 2x: acceptance 50% (break-even 16.7%); tokens per target pass 2.00 tokens (per-request "
        "records; 1.94 tokens expected from the acceptance, i.i.d.), needs more than 1.20 tokens (k 4.00 × c "
        "0.0500 + 1); a drafter step costs 0.0500 of a target step (measured: the candidate's time per target "
        "pass / the baseline's per token)"
    )


def test_a_drafter_that_costs_more_than_its_acceptance_returns_is_unlikely():
    # 30 ms x 1.3 tokens per pass = 39 ms per pass against 20 ms per token: 1.95 target steps
    # per pass (c = 0.95 / 4 = 0.2375); 1.3 tokens per pass do not pay for it.
    heads = [headline("baseline", "2x", tpot=0.020), headline("draft k=4", "2x", tpot=0.030, tpp=1.3)]
    spec = [evidence("draft k=4", "2x", accepted=120)]
    result = drafter(heads=heads, spec=spec, configs={"draft k=4": DRAFT4})
    (row,) = result["numbers"]["candidates"]
    assert result["verdict"] == "unlikely" and row["pays"] is False
    assert row["c"] == pytest.approx(0.2375) and row["needed_tokens_per_pass"] == pytest.approx(1.95)
    assert row["alpha"] == pytest.approx(0.3) and fit_proposers.tokens_per_verification(
        row["alpha_needed"], 4
    ) == pytest.approx(1.95)
    assert "no candidate pays for its drafting" in result["reason"]


def test_it_estimates_c_where_the_runs_cannot_measure_it():
    # Server counters only: no per-request tokens per pass, so c is the n-gram estimate (0) and
    # the server's mean acceptance length stands for tokens per (drafting) pass.
    heads = [headline("baseline", "2x", tpot=0.02), headline("ngram k=3", "2x", tpot=0.015, tpp=1.0)]
    spec = [
        evidence(
            "ngram k=3",
            "2x",
            source="run-level (server counters)",
            drafts=10,
            drafted=30,
            accepted=12,
            length=2.2,
        )
    ]
    result = drafter(heads=heads, spec=spec, configs={"ngram k=3": NGRAM4 | {"num_speculative_tokens": 3}})
    (row,) = result["numbers"]["candidates"]
    assert row["c"] == 0.0 and row["c_source"] == "estimated: no model, a lookup on the host"
    assert row["tokens_per_pass"] == 2.2 and row["tokens_per_pass_source"] == "run-level (server counters)"
    assert (
        row["needed_tokens_per_pass"] == 1.0 and row["alpha_needed"] == 0.0 and result["verdict"] == "likely"
    )
    # Before any run, a draft model's c is its weight bytes over the target's: 490 / 1,100.
    before = drafter(configs={"draft k=4": DRAFT4})
    (row,) = before["numbers"]["candidates"]
    assert row["c"] == pytest.approx(490 / 1100) and row["needed_tokens_per_pass"] == pytest.approx(
        4 * 490 / 1100 + 1
    )
    assert row["alpha"] is None and row["pays"] is None
    assert before["verdict"] == "unknown" and before["reason"].startswith(
        "not measured: no comparison of the candidates yet"
    )
    assert "draft k=4 needs more than 2.78 tokens per target pass" in before["reason"]


def test_the_drafter_condition_is_not_measured_without_its_inputs():
    # An EAGLE head before any run: no timing and no estimate of its cost.
    eagle = drafter(configs={"eagle k=3": {"method": "eagle", "num_speculative_tokens": 3}})
    assert (
        eagle["verdict"] == "unknown" and eagle["reason"] == "not measured: no comparison of the candidates yet"
    )
    row = eagle["numbers"]["candidates"][0]
    assert (
        row["c"] is None
        and row["needed_tokens_per_pass"] is None
        and row["c_source"].startswith("not measured")
    )
    line = fit_assessment.numbers_lines("drafter_acceptance", eagle["numbers"])[1]
    assert "acceptance not measured (break-even not measured)" in line
    assert (
        "tokens per target pass not measured, needs not measured; a drafter step costs not measured" in line
    )
    # A candidate that ran with no acceptance evidence at all (a server without counters).
    heads = [headline("baseline", "2x", tpot=0.02), headline("ngram k=4", "2x", tpot=0.02, tpp=None)]
    spec = [evidence("ngram k=4", "2x", source=None, drafts=None, drafted=None, accepted=0)]
    silent = drafter(heads=heads, spec=spec, configs={"ngram k=4": NGRAM4})
    assert (
        silent["verdict"] == "unknown"
        and "no candidate has both its acceptance and its cost" in silent["reason"]
    )
    assert silent["numbers"]["candidates"][0]["pays"] is None
    # No speculative candidate at all (an A/A experiment).
    assert drafter(configs={"again": None})["reason"] == "not measured: no speculative candidate"


def test_break_even_acceptance_inverts_the_iid_expectation():
    assert (
        fit_proposers.tokens_per_verification(0.0, 4) == 1.0
        and fit_proposers.tokens_per_verification(1.0, 4) == 5
    )
    assert fit_proposers.break_even_alpha(1.0, 4) == 0.0 and fit_proposers.break_even_alpha(5.0, 4) is None
    for needed in (1.5, 2.0, 3.0, 4.5):
        alpha = fit_proposers.break_even_alpha(needed, 4)
        assert 0 < alpha < 1 and fit_proposers.tokens_per_verification(alpha, 4) == pytest.approx(needed)
    assert fit_proposers.break_even_alpha(2.0, 1) is None  # k + 1 tokens only at 100 %: equal, never more


def test_it_warns_where_generation_is_under_half_of_end_to_end_latency():
    shares = fit_conditions.generation_share([run_stats(), run_stats(load="1x", generation_share={"batch": [0.3, 0.4]})])
    by_class = {g["traffic_class"]: g for g in shares}
    assert by_class["interactive"]["median"] == pytest.approx(0.8) and by_class["interactive"]["warning"] is None
    batch = by_class["batch"]
    assert batch["n"] == 3 and batch["median"] == pytest.approx(0.3)
    assert "cannot move end-to-end latency much" in batch["warning"]
    assert {b["load"] for b in batch["by_load"]} == {"1x", "2x"}


def test_it_reduces_a_stored_run_with_external_time_reference_answers_and_validity():
    rows = [
        # ttft 0.5, e2e 1.1 (scheduled 0): generation 0.6 s; 0.9 s of retrieval makes e2e 2.0.
        request_row(request_id="a", output_text="so the answer is 1,234"),
        request_row(request_id="b", traffic_class="batch", output_text="42", json_valid=True, schema_valid=False),
        request_row(request_id="c", error="boom", finish_s=np.nan, first_token_s=np.nan, finish_reason=None),
    ]
    frame = pd.DataFrame(rows)
    for col in ("json_valid", "schema_valid", "tool_call_valid"):
        frame[col] = frame.get(col)
    derived = requests_derive(frame)
    stats = fit_stats.run_fit_stats(
        derived,
        metadata={"a": {"reference_answer": "1234", "retrieval_s": 0.9}, "b": {}, "c": {"reference_answer": 7}},
        telemetry={"mean_util": None, "counters": {}},
        hardware={"gpus": []},
        run={"load": "1x", "rate_multiplier": 1.0, "concurrency_cap": None, "repeat": 0},
    )
    assert stats["generation_share"]["interactive"] == [pytest.approx(0.3)]
    assert stats["generation_share"]["batch"] == [pytest.approx(0.6 / 1.1, abs=1e-4)]
    assert stats["external_time"] is True
    assert stats["quality"]["reference_answer"] == [2, 1]  # a right, c failed
    assert stats["quality"]["json_schema"] == [1, 0]
    assert stats["n_completed"] == 2 and stats["output_tokens"] == [4, 4]
    assert stats["inflight_mean"] == pytest.approx(2.0) and stats["inflight_max"] == 2


def test_it_counts_requests_in_flight():
    assert fit_stats.inflight([0.0, 0.5, 2.0], [1.0, 1.5, 3.0]) == (pytest.approx(3.0 / 3.0), 2)
    assert fit_stats.inflight([], []) == (None, None)


def test_it_reads_recorded_lengths_and_external_time_from_metadata():
    assert fit_stats.recorded_output_tokens({"paired": {"trace_output_tokens": 300}}) == 300
    assert fit_stats.recorded_output_tokens({"output_tokens": 12.0}) == 12
    assert fit_stats.recorded_output_tokens({"output_tokens": "many"}) is None
    assert fit_stats.external_seconds({"retrieval_s": 0.5, "tool_s": 1.0, "external_s": "x"}) == 1.5
    assert fit_stats.external_seconds({"retrieval_s": -1, "tool_s": float("nan")}) == 0.0
    assert fit_stats.answer_correct("3 apples then 18", "18") is True
    assert fit_stats.answer_correct("no number", 18) is False
    assert fit_stats.answer_correct("18", "eighteen") is None
    # Hostile metadata grades nothing rather than failing the summary.
    assert fit_stats.answer_correct("nan", "nan") is None and fit_stats.answer_correct("1", {"x": 1}) is None
    assert fit_stats.external_seconds({"retrieval_s": True, "tool_s": "1e308"}) == 0.0
    assert fit_stats.external_seconds(["not", "a", "mapping"]) == 0.0  # type: ignore[arg-type]


@pytest.mark.django_db
def test_the_experiment_page_judges_each_candidates_drafter_from_the_stored_comparison(viewer_client):
    from console.analysis.selectors import comparison_summary_for_experiment
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=20, ks=(2, 4), loads="1x,2x", repeats=1, seed=5)
    url = f"/api/experiments/{experiment.pk}"
    before = cond(viewer_client.get(url).json()["fit_assessment"], "drafter_acceptance")
    assert before["verdict"] == "unknown" and before["reason"].startswith("not measured: no comparison of the candidates yet")
    comparison_refresh(experiment_id=experiment.pk, n_boot=20)
    summary = comparison_summary_for_experiment(experiment=experiment)
    after = cond(viewer_client.get(url).json()["fit_assessment"], "drafter_acceptance")
    rows = {r["arm"]: r for r in after["numbers"]["candidates"]}
    assert set(rows) == {"ngram k=2", "ngram k=4"} and after["numbers"]["judged_at"] == "2x"
    head = {(h.arm, h.load): h for h in summary.headline}
    for arm, row in rows.items():
        cand, base = head[(arm, "2x")], head[("baseline", "2x")]
        assert row["load"] == "2x" and row["alpha"] == pytest.approx(cand.acceptance_rate)
        assert row["tokens_per_pass"] == pytest.approx(cand.tokens_per_pass) and row["k"] == cand.drafted / cand.drafts
        # c from the runs: the candidate's seconds per target pass over the baseline's per token, less one, per k.
        per_pass = cand.tpot_s_mean * cand.tokens_per_pass / base.tpot_s_mean
        assert row["c"] == pytest.approx(max(per_pass - 1, 0) / row["k"]) and row["c_source"].startswith("measured")
        assert row["pays"] == (cand.tokens_per_pass > row["k"] * row["c"] + 1)
    assert after["verdict"] == ("likely" if any(r["pays"] for r in rows.values()) else "unlikely")
    html = viewer_client.get(f"/experiments/{experiment.pk}/").content.decode()
    section = html[html.index('id="fit-drafter_acceptance"') : html.index("</tr>", html.index('id="fit-drafter_acceptance"'))]
    assert "The drafter&#x27;s acceptance is high enough to pay for its cost" in section
    assert "ngram k=2 at 2x: acceptance" in section and "tokens per target pass" in section
    assert "6 conditions, judged" in html
