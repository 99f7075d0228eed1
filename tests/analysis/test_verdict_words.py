"""The comparison's answer in plain words (issue 22, point 2): which candidate, where, how sure,
and what would decide what is still open."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from console.analysis.verdict_words import verdict_lines


@dataclass
class Row:
    arm: str
    load: str
    verdict: str | None
    measured: bool = True
    reason: str | None = None
    p_holm: float | None = 0.004
    metric: str = "tpot_s"
    stat: str = "p95"
    delta_text: str = "-12.0 ms"
    interval_text: str = "[-15.0 ms, -9.0 ms]"


def _lines(*rows):
    return {v.arm: v for v in verdict_lines(list(rows), metric="tpot_s", stat="p95", promised="interactive")}


def test_it_names_the_candidate_that_pays_everywhere_with_its_interval_and_holm_p():
    v = _lines(Row("ngram", "1x", "better"), Row("ngram", "4x", "better"))["ngram"]
    assert v.tone == "better"
    assert v.sentence.startswith("ngram improves interactive TPOT p95 beyond the noise floor at every load: ")
    assert "better at 4x (-12.0 ms [-15.0 ms, -9.0 ms], Holm p 0.004)" in v.sentence


def test_it_says_what_would_decide_a_load_left_open():
    reason = "not measured (n too small): 20 requests, p95 needs 40"
    v = _lines(Row("draft", "1x", "better"), Row("draft", "4x", None, measured=False, reason=reason))["draft"]
    assert v.tone == "open" and f"not measured at 4x: {reason}" in v.sentence


@pytest.mark.parametrize(("verdicts", "tone"), [(("worse", "better"), "worse"), (("not-distinguishable",), "open")])
def test_a_worse_load_or_no_clear_difference_is_never_called_a_win(verdicts, tone):
    rows = [Row("k4", f"{i}x", v) for i, v in enumerate(verdicts, start=1)]
    assert _lines(*rows)["k4"].tone == tone


def test_it_reads_only_the_declared_primary_endpoint():
    assert verdict_lines([Row("k2", "1x", "better", metric="e2e_s")], metric="tpot_s", stat="p95", promised="x") == []
