"""Graded correctness on real GSM8K and HumanEval prompts (the shared data folder), through the same
parsers the trace import uses, the comparison and the gate's quality criterion."""

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from console.analysis.comparison import comparison_compute
from console.analysis.comparison.schema import comparison_load
from console.analysis.grading import (
    correctness_flags,
    extract_code,
    final_number,
    grade,
    grade_tool_calls,
    proportion_interval,
    reference_of,
)
from console.decisions.gate import criterion_quality, gate_facts_from_summary, gate_settings_resolve
from console.traces.errors import ErrorLog
from console.traces.parsers.base import ParseContext
from console.traces.parsers.prompts import GSM8KParser, HumanEvalParser
from tests.analysis.builders import synthetic_experiment
from tests.conftest import SHARED_DATA

DATA = SHARED_DATA / "prompts"
DEADLINES = {"interactive": {"e2e_s": 10, "ttft_s": 1}, "batch": {"e2e_s": 120}}


def _parsed(parser, path: Path, n: int) -> list[dict]:
    lines = path.read_text().splitlines()[:n]
    ctx = ParseContext(file=path.name, errors=ErrorLog(file=path.name))
    records = [r.data for r in parser().parse(io.BytesIO("\n".join(lines).encode()), ctx)]
    assert not ctx.errors.errors
    return records


@pytest.fixture(scope="module")
def gsm8k():
    """(parsed request, the dataset's worked solution) for the first 40 GSM8K problems."""
    path = DATA / "gsm8k" / "test.first300_filtered.jsonl"
    raw = [json.loads(line) for line in path.read_text().splitlines()[:40]]
    return list(zip(_parsed(GSM8KParser, path, 40), [r["answer"] for r in raw], strict=True))


@pytest.fixture(scope="module")
def humaneval():
    """(parsed request, canonical solution) for the first 12 HumanEval problems."""
    path = DATA / "humaneval" / "HumanEval.jsonl"
    raw = [json.loads(line) for line in path.read_text().splitlines()[:12]]
    return list(zip(_parsed(HumanEvalParser, path, 12), [r["canonical_solution"] for r in raw], strict=True))


def _wrong_number(solution: str) -> str:
    value = final_number(solution)
    assert value is not None
    return solution.rsplit("####", 1)[0] + f"#### {int(value) + 7}"


def test_it_grades_gsm8k_reference_solutions_correct_and_changed_answers_wrong(gsm8k):
    for request, solution in gsm8k:
        ref = reference_of(request["metadata"])
        assert ref is not None and ref["kind"] == "math"
        assert grade(solution, ref) == (True, None), request["id"]
        correct, reason = grade(_wrong_number(solution), ref)
        assert correct is False and "expected" in reason


def test_it_extracts_the_final_number_robustly():
    assert final_number("So she pays $1,234.50 in total.") == final_number("1234.5")
    assert final_number("The answer is 18.") == 18
    assert final_number("3/4 of 12 is 9, so the answer is 3/4") == final_number("0.75")
    assert final_number("We get \\boxed{42} after 7 steps") == 42
    assert final_number("#### -5\nThat was 10 steps.") == -5
    assert final_number("I cannot tell") is None
    assert final_number("1, 2, 3") == 3


def test_it_grades_humaneval_canonical_solutions_correct_and_broken_ones_wrong(humaneval):
    for request, solution in humaneval:
        ref = reference_of(request["metadata"], prompt=request["prompt"])
        assert ref is not None and ref["kind"] == "code"
        assert grade(solution, ref) == (True, None), request["id"]
        # A chat-style answer: the whole function in a fence, after some prose.
        fenced = f"Here you go:\n```python\n{request['prompt']}{solution}```\nHope it helps."
        assert grade(fenced, ref)[0] is True, request["id"]
        broken = re.sub(r"return (.+)", r"return None", solution, count=1)
        assert broken != solution
        correct, reason = grade(broken, ref)
        assert correct is False and reason.startswith("tests failed"), request["id"]


def test_it_does_not_pass_an_answer_that_exits_before_the_tests(humaneval):
    request, _ = humaneval[0]
    ref = reference_of(request["metadata"], prompt=request["prompt"])
    assert grade("    import os\n    os._exit(0)\n", ref)[0] is False
    assert grade("    import sys\n    sys.exit(0)\n", ref)[0] is False


def test_it_says_not_gradable_without_a_reference():
    assert reference_of({}) is None
    assert reference_of({"question_id": 3, "category": "writing"}) is None
    frame = pd.DataFrame(
        {"request_id": ["a", "b"], "output_text": ["42", "42"], "completed": [True, True], "error": [None, None]}
    )
    flags = correctness_flags(frame, {"a": reference_of({"reference_answer": "42"})})
    assert flags["gradable"].tolist() == [True, False]
    assert flags["correct"].iloc[0] == True  # noqa: E712
    assert pd.isna(flags["correct"].iloc[1])


def test_it_grades_tool_calls_against_ground_truth():
    bfcl = {"kind": "tool_call", "ground_truth": [{"area": {"base": [10], "height": [5], "unit": ["units", ""]}}]}
    assert grade_tool_calls('{"name": "area", "arguments": {"base": 10, "height": 5}}', bfcl) == (True, None)
    assert grade_tool_calls('{"name": "area", "arguments": {"base": 10.0, "height": 5, "unit": "units"}}', bfcl)[0]
    assert grade_tool_calls('{"name": "area", "arguments": {"base": 11, "height": 5}}', bfcl)[0] is False
    assert grade_tool_calls('{"name": "area", "arguments": {"base": 10}}', bfcl)[0] is False
    assert grade_tool_calls("no call", bfcl)[0] is False
    exact = {"kind": "tool_call", "reference_tool_calls": [{"name": "f", "arguments": {"x": 1}}]}
    assert grade_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>', exact)[0]
    assert grade_tool_calls('{"name": "g", "arguments": {"x": 1}}', exact)[0] is False


def test_it_grades_json_against_a_reference():
    ref = reference_of({"reference_json": {"a": 1}})
    assert grade('```json\n{"a": 1}\n```', ref)[0] is True
    assert grade('{"a": 2}', ref)[0] is False


def test_it_extracts_the_block_that_defines_the_entry_point():
    text = "```\npip install x\n```\n```python\ndef f():\n    return 1\n```"
    assert extract_code(text, "f").startswith("def f")
    assert extract_code("    return 1\n", "f") == "    return 1\n"


def test_it_gives_a_request_clustered_interval():
    rng = np.random.default_rng(0)
    k = rng.integers(0, 3, 200)
    lo, hi, method = proportion_interval(k, np.full(200, 2), n_boot=2000, seed=0, ci=0.95)
    assert method == "bootstrap" and lo < k.sum() / 400 < hi and hi - lo < 0.2
    lo, hi, method = proportion_interval(np.full(30, 2), np.full(30, 2), n_boot=2000, seed=0, ci=0.95)
    assert method == "wilson" and hi == pytest.approx(1.0) and 0.85 < lo < 1.0


def _graded_experiment(gsm8k, humaneval, *, wrong_every: int | None):
    """A synthetic timing experiment whose requests are real GSM8K and HumanEval prompts: the
    baseline answers with the reference solutions, candidate ``k2`` too, except every
    ``wrong_every``-th request, where it answers wrong."""
    items = [(r, s, "math") for r, s in gsm8k] + [(r, s, "code") for r, s in humaneval]
    requests, runs = synthetic_experiment(n_requests=len(items), arms={"base": 1.0, "k2": 0.7}, repeats=2, seed=3)
    references, answers, wrong = {}, {}, {}
    for i, (request, solution, kind) in enumerate(items):
        rid = f"r{i}"
        references[rid] = reference_of(request["metadata"], prompt=request.get("prompt"))
        answers[rid] = solution
        wrong[rid] = _wrong_number(solution) if kind == "math" else "    return None\n"
    requests["task"] = [items[int(r[1:])][2] for r in requests["request_id"]]
    requests["response_format"] = None
    planted = {f"r{i}" for i in range(0, len(items), wrong_every)} if wrong_every else set()
    requests["output_text"] = [
        wrong[rid] if arm == "k2" and rid in planted else answers[rid]
        for rid, arm in zip(requests["request_id"], requests["arm"], strict=True)
    ]
    return requests, runs, references, planted


def test_it_reports_correctness_and_regressions_and_fails_the_gate(gsm8k, humaneval):
    requests, runs, references, planted = _graded_experiment(gsm8k, humaneval, wrong_every=4)
    summary = comparison_compute(
        requests, runs, deadlines=DEADLINES, cost_per_hour_usd=2.0, n_boot=200, seed=0, references=references
    )
    json.dumps(summary, allow_nan=False)
    corr = summary["correctness"]
    rates = {(r["arm"], r["task"]): r for r in corr["rates"]}
    assert rates[("base", "math")]["rate"] == 1.0 and rates[("base", "code")]["rate"] == 1.0
    n_math_planted = sum(1 for p in planted if int(p[1:]) < len(gsm8k))
    math_k2 = rates[("k2", "math")]
    assert math_k2["gradable"] == 2 * len(gsm8k)
    assert math_k2["correct"] == 2 * (len(gsm8k) - n_math_planted)
    assert math_k2["interval_lo"] < math_k2["rate"] < math_k2["interval_hi"] < 1.0
    assert corr["n_regressions"] == 2 * len(planted)
    assert {r["request_id"] for r in corr["regressions"]} == planted
    counts = {(c["task"], c["check"]): c for c in corr["counts"]}
    assert counts[("math", "correct")]["regressions"] == 2 * n_math_planted
    assert counts[("math", "correct")]["improvements"] == 0
    # Success now needs the right answer.
    head = {h["arm"]: h for h in summary["headline"]}
    assert head["k2"]["success_mean"] < head["base"]["success_mean"]
    facts = gate_facts_from_summary(comparison_load(summary), candidate_arm="k2", traffic_class="interactive")
    verdict = criterion_quality(facts, gate_settings_resolve(None))
    assert verdict["status"] == "fail"
    assert "math correct" in verdict["summary"] and "code correct" in verdict["summary"]


def test_it_passes_the_gate_when_the_candidate_answers_alike(gsm8k, humaneval):
    requests, runs, references, _ = _graded_experiment(gsm8k[:10], humaneval[:3], wrong_every=None)
    summary = comparison_compute(
        requests, runs, deadlines=DEADLINES, cost_per_hour_usd=2.0, n_boot=100, seed=0, references=references
    )
    assert summary["correctness"]["n_regressions"] == 0
    facts = gate_facts_from_summary(comparison_load(summary), candidate_arm="k2", traffic_class="interactive")
    checks = [c for c in facts["quality"]["checks"] if c["check"] == "correct"]
    assert checks and all(c["regressions"] == 0 for c in checks)
    assert criterion_quality(facts, gate_settings_resolve(None))["status"] == "pass"


def test_it_leaves_requests_without_references_ungraded_in_the_comparison():
    requests, runs = synthetic_experiment(n_requests=20, arms={"base": 1.0, "k2": 0.7}, repeats=1, seed=0)
    summary = comparison_compute(requests, runs, deadlines=DEADLINES, cost_per_hour_usd=2.0, n_boot=50)
    assert summary["correctness"]["rates"] == [] and summary["correctness"]["counts"] == []
    assert summary["correctness"]["n_gradable"] == 0


@pytest.mark.django_db
def test_it_grades_in_the_worker_computation_and_shows_it_on_the_page_and_api(viewer_client, gsm8k):
    from console.analysis.services import comparison_refresh
    from console.results.models import RequestResult
    from console.traces.models import TraceRequest
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=24, ks=(2,), loads="1x", repeats=1)
    graded = list(TraceRequest.objects.filter(trace=experiment.trace).order_by("position")[:8])
    for tr, (request, solution) in zip(graded, gsm8k, strict=False):
        tr.task, tr.metadata = "math", request["metadata"]
        tr.save(update_fields=["task", "metadata"])
        RequestResult.objects.filter(trace_request=tr).update(output_text=solution)
    wrong_tr, (_, wrong_solution) = graded[0], gsm8k[0]
    RequestResult.objects.filter(trace_request=wrong_tr, run__arm__label="ngram k=2").update(
        output_text=_wrong_number(wrong_solution)
    )
    comparison_refresh(experiment_id=experiment.pk, n_boot=200)  # what the task does when runs end
    summary = viewer_client.get(f"/api/experiments/{experiment.pk}/comparison").json()
    rates = {r["arm"]: r for r in summary["correctness"]["rates"] if r["task"] == "math"}
    assert rates["baseline"]["gradable"] == 8 and rates["baseline"]["correct"] == 8
    assert rates["ngram k=2"]["correct"] == 7 and rates["ngram k=2"]["rate"] == pytest.approx(7 / 8)
    lo, hi = rates["ngram k=2"]["interval"]
    assert lo < 7 / 8 < hi
    assert summary["correctness"]["n_not_gradable"] == 2 * (24 - 8)
    assert [r["request_id"] for r in summary["correctness"]["regressions"]] == [wrong_tr.request_id]
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    assert 'id="correctness"' in html and "87.5%" in html  # 7 of 8, a rate


@pytest.mark.django_db
def test_the_page_does_not_call_no_regression_good_news_when_nothing_was_correct(viewer_client, gsm8k):
    """Both arms answer every graded request wrong: 0 regressions, and the page says that no answer
    was correct instead of a green "0" (issue 22, point 5)."""
    from console.analysis.services import comparison_refresh
    from console.results.models import RequestResult
    from console.traces.models import TraceRequest
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=12, ks=(2,), loads="1x", repeats=1)
    graded = list(TraceRequest.objects.filter(trace=experiment.trace).order_by("position")[:7])
    for tr, (request, solution) in zip(graded, gsm8k, strict=False):
        tr.task, tr.metadata = "math", request["metadata"]
        tr.save(update_fields=["task", "metadata"])
        RequestResult.objects.filter(trace_request=tr).update(output_text=_wrong_number(solution))
    comparison_refresh(experiment_id=experiment.pk, n_boot=50)
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    heading = html[html.index('id="correctness"') :]
    heading = heading[: heading.index("</h2>")]
    assert '<span class="badge na">0 regressions</span>' in heading
    assert '<span class="badge fail" id="correct-total">0 of 14 graded answers correct</span>' in heading
    assert "No graded answer was correct in any arm" in html


@pytest.mark.parametrize(
    "metadata",
    [
        {"test": 3, "entry_point": "f"},
        {"test": "def check(c): pass", "entry_point": "not a name; import os"},
        {"reference_answer": "no number here"},
        {"reference_answer": True},
        {"ground_truth": [{"f": "not an object"}]},
        {"ground_truth": []},
        {"reference_tool_calls": [{"arguments": {}}]},
    ],
)
def test_it_leaves_a_malformed_reference_ungraded_rather_than_wrong(metadata):
    frame = pd.DataFrame({"request_id": ["a"], "output_text": ["42"], "completed": [True], "error": [None]})
    flags = correctness_flags(frame, {"a": reference_of(metadata, prompt="def f():\n")})
    assert flags["gradable"].tolist() == [False] and pd.isna(flags["correct"].iloc[0])
