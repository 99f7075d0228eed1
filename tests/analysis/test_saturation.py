"""A load where the baseline was past saturation (issue 23): the comparison says so beside every
end-to-end and goodput figure there, with the rates and waits that show it, and the verdict
words say an indistinguishable result there is limited by the overloaded baseline."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest

from console.analysis.comparison import comparison_compute
from console.analysis.comparison.saturation import saturation_rows
from console.analysis.comparison.schema import SaturationRow, comparison_load
from console.analysis.metrics import requests_derive
from console.analysis.verdict_words import saturated_loads, saturation_sentence, verdict_lines
from tests.analysis.builders import frame, request_row, runs_frame
from tests.test_page_numbers import findings, visible_text


def _fifo(n: int, *, gap_s: float, service_s: float, ttft_s: float = 0.1, **row) -> list[dict]:
    """``n`` requests arriving every ``gap_s`` seconds at one server that serves them one at a
    time, first come first served, each for ``service_s`` seconds (its first token ``ttft_s``
    after it starts)."""
    rows, free = [], 0.0
    for i in range(n):
        sched = i * gap_s
        start = max(sched, free)
        first, finish = start + ttft_s, start + service_s
        free = finish
        rows.append(
            request_row(
                request_id=f"r{i}",
                scheduled_s=sched,
                sent_s=sched,
                first_token_s=first,
                finish_s=finish,
                queue_s=0.0,
                chunk_times=[first, (first + finish) / 2, finish],
                **row,
            )
        )
    return rows


def _experiment():
    """Baseline and candidate, two repeats at 1x (both keep up) and at 2x (requests every 0.5 s:
    the baseline needs 0.8 s each, the candidate 0.3 s)."""
    rows, runs, run_id = [], [], 0
    for load, base_service in (("1x", 0.3), ("2x", 0.8)):
        for repeat in range(2):
            for arm, service in (("base", base_service), ("spec", 0.3)):
                run_id += 1
                common = {
                    "run_id": run_id,
                    "arm": arm,
                    "is_baseline": arm == "base",
                    "load": load,
                    "repeat": repeat,
                }
                rows += _fifo(30, gap_s=0.5, service_s=service, **common)
                runs.append(common | {"wall_s": 30.0})
    return frame(*rows), runs_frame(
        *[{k: r[k] for k in ("run_id", "arm", "load", "repeat", "wall_s")} for r in runs]
    )


@pytest.fixture(scope="module")
def computed():
    requests, runs = _experiment()
    return comparison_load(
        comparison_compute(requests, runs, deadlines=None, cost_per_hour_usd=1.0, n_boot=50)
    )


def _row(comparison, arm, load) -> SaturationRow:
    return next(r for r in comparison.saturation if r.arm == arm and r.load == load)


def test_it_finds_the_baseline_past_saturation_with_hand_checked_numbers(computed):
    row = _row(computed, "base", "2x")
    # arrivals every 0.5 s; completions every 0.8 s; request i waits 0.3 i + 0.1 s for its first
    # token, so the first third (i = 0..9) has a median of 1.45 s and the last (20..29) 7.45 s.
    assert row.arrival_rps == pytest.approx(2.0) and row.completed_rps == pytest.approx(1.25)
    assert row.wait_first_s == pytest.approx(1.45) and row.wait_last_s == pytest.approx(7.45)
    assert (row.rate_short, row.waits_grew, row.saturated, row.n_runs) == (True, True, True, 2)
    assert saturation_sentence(row) == (
        "baseline past saturation at 2x: completed 1.25 req/s of 2.00 req/s arriving; waits grew from 1.45 s to 7.45 s"
    )


def test_a_load_that_keeps_up_gets_no_notice(computed):
    for arm, load in (("base", "1x"), ("spec", "1x"), ("spec", "2x")):
        row = _row(computed, arm, load)
        assert row.saturated is False and row.completed_rps == pytest.approx(2.0), (arm, load)
    assert list(saturated_loads(computed.saturation)) == ["2x"]


def test_too_few_requests_is_not_measured_not_a_pass():
    derived = requests_derive(frame(*_fifo(4, gap_s=0.5, service_s=2.0)))
    (row,) = saturation_rows(derived, base_arm="base")
    assert row["saturated"] is None and row["reason"].startswith("not measured")


def _queue(rng, n: int, utilisation: float) -> list[dict]:
    """A simulated M/G/1 run: Poisson arrivals at 2 req/s, lognormal service times."""
    arrivals = np.cumsum(rng.exponential(0.5, n))
    service = rng.lognormal(np.log(utilisation / 2) - 0.11, 0.47, n)
    rows, free = [], 0.0
    for i in range(n):
        start = max(arrivals[i], free)
        free = start + service[i]
        first = start + 0.1 * service[i]
        rows.append(
            request_row(
                request_id=f"r{i}",
                scheduled_s=arrivals[i],
                sent_s=arrivals[i],
                first_token_s=first,
                finish_s=free,
                chunk_times=[first, free],
                chunk_tokens=[1, 3],
            )
        )
    return rows


@pytest.mark.parametrize(("utilisation", "expected"), [(0.5, False), (1.7, True)])
def test_it_tells_a_queue_that_keeps_up_from_one_that_does_not(utilisation, expected):
    rng = np.random.default_rng(7)
    verdicts = []
    for _ in range(20):
        rows = [r | {"run_id": rep, "repeat": rep} for rep in (0, 1) for r in _queue(rng, 200, utilisation)]
        (row,) = saturation_rows(requests_derive(frame(*rows)), base_arm="base")
        verdicts.append(row["saturated"])
    assert verdicts.count(expected) >= 19


@dataclass
class Primary:
    arm: str
    load: str
    verdict: str | None
    measured: bool = True
    reason: str | None = None
    p_holm: float | None = 0.2
    metric: str = "e2e_s"
    stat: str = "p95"
    delta_text: str = "-0.50 s"
    interval_text: str = "[-2.00 s, +1.00 s]"


def test_the_verdict_says_an_indistinguishable_result_at_a_saturated_load_is_limited_by_the_baseline(
    computed,
):
    saturated = saturated_loads(computed.saturation)
    rows = [Primary("spec", "1x", "not-distinguishable"), Primary("spec", "2x", "not-distinguishable")]
    (line,) = verdict_lines(rows, metric="e2e_s", stat="p95", promised="interactive", saturated=saturated)
    assert "not distinguishable from the baseline at 1x;" in line.sentence
    assert (
        "not distinguishable from the baseline at 2x, limited by the overloaded baseline "
        f"({saturated['2x']}); compare at a load the baseline sustains" in line.sentence
    )
    (plain,) = verdict_lines(rows, metric="e2e_s", stat="p95", promised="interactive")
    assert "overloaded" not in plain.sentence


def _queue_the_baseline(experiment, load: str) -> None:
    """Make the stored baseline runs at ``load`` one-at-a-time servers: each request starts when
    the previous one finished, so work arrives faster than it is done."""
    from console.results.models import RequestResult

    for run in experiment.runs.filter(arm__is_baseline=True, load_label=load):
        rows = list(RequestResult.objects.filter(run=run).order_by("scheduled_s"))
        free = 0.0
        for r in rows:
            start = max(r.scheduled_s, free)
            shift = start - r.scheduled_s
            r.first_token_s += shift
            r.finish_s += shift
            r.chunk_times = [t + shift for t in r.chunk_times]
            free = r.finish_s
        RequestResult.objects.bulk_update(rows, ["first_token_s", "finish_s", "chunk_times"])


@pytest.mark.django_db
def test_the_page_says_so_beside_every_e2e_and_goodput_figure_at_that_load(viewer_client):
    from console.analysis.models import ComparisonCache
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(
        n_requests=60, ks=(2,), loads="1x,2x", repeats=2, seed=11, name="saturated"
    )
    _queue_the_baseline(experiment, "2x")
    comparison_refresh(experiment_id=experiment.pk, n_boot=50)
    stored = comparison_load(ComparisonCache.objects.get(experiment=experiment).data)
    assert list(saturated_loads(stored.saturation)) == ["2x"]
    sentence = saturated_loads(stored.saturation)["2x"]
    assert re.fullmatch(
        r"baseline past saturation at 2x: completed .* req/s of .* req/s arriving; waits grew .*", sentence
    )
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    assert (
        findings(visible_text(html), {"code", "chat", "math", "json", "tool_call", "interactive", "batch"})
        == []
    )
    notice = html[html.index('id="saturation"') :]
    assert sentence[0].upper() + sentence[1:] in notice[: notice.index("</div>")]
    headline = html[html.index('id="headline"') : html.index("</table>", html.index('id="headline"'))]
    note = f'<span class="floor saturation-note" title="{sentence}">baseline past saturation at 2x</span>'
    rows_2x = [row for row in headline.split("<tr>") if "<td>2x</td>" in row]
    assert len(rows_2x) == 2 and all(row.count(note) == 3 for row in rows_2x)  # e2e p95, goodput, e2e p99
    assert "past saturation at 1x" not in html
    goodput = html[
        html.index('id="class-goodput"') : html.index("</section>", html.index('id="class-goodput"'))
    ]
    assert goodput.count("baseline past saturation at 2x</span>") == goodput.count("<td>2x</td>") > 0
    verdict = html[html.index('id="verdict"') : html.index("</section>", html.index('id="verdict"'))]
    assert "at 2x" in verdict and sentence in verdict
    sliced = viewer_client.get(f"/analysis/experiments/{experiment.pk}/?slice=task:code").content.decode()
    assert note in sliced[sliced.index('id="headline"') :]
