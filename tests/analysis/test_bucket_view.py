"""The comparison page's view of each declared output bucket (issue 23, part 3): an experiment
whose runs replay two output-length buckets (``Experiment.output_buckets``) gets a slice per
bucket, and a bucket's view shows that bucket's numbers, never the pooled ones."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from django.test import override_settings
from django.utils import timezone

from console import numbers
from console.experiments.services import experiment_create
from console.results.models import RequestResult, RunTelemetry
from console.traces.models import Trace, TraceRequest
from tests.test_page_numbers import findings, visible_text
from workers.execution import run_requests

pytestmark = pytest.mark.django_db

SERVER = "synthetic-none"
N_PER_BUCKET = 12  # requests per bucket; 2 repeats each
# Per bucket (label as parsed from "0:16,50:100"): output tokens, the seconds between tokens
# (baseline, candidate) and whether the candidate's drafts are all accepted (else none is).
BUCKETS = {"0-50": (16, 0.010, 0.005, True), "50+": (60, 0.040, 0.060, False)}


def _steps(n_tokens: int, all_accepted: bool) -> tuple[list[int], list[int], list[int]]:
    """k = 2 drafts after the prefill's token: (drafted, accepted, chunk tokens)."""
    drafted, accepted, chunks, left = [], [], [1], n_tokens - 1
    while left:
        a = min(2 if all_accepted else 0, left - 1)
        drafted.append(2)
        accepted.append(a)
        chunks.append(a + 1)
        left -= a + 1
    return drafted, accepted, chunks


def bucketed_experiment():
    """A done experiment (openai engine, no server contacted) with baseline and n-gram k=2 over
    two declared output buckets, each bucket's runs holding only its requests. Every number is
    made up and fixed: the short bucket's candidate is twice as fast and accepts every draft, the
    long bucket's is 1.5x slower and accepts none."""
    n = 2 * N_PER_BUCKET
    trace = Trace.objects.create(
        name="buckets (synthetic)",
        sha256=hashlib.sha256(b"bucket-view").hexdigest(),
        source_format="synthetic",
        request_count=n,
        arrival_spec="fixed",
    )
    TraceRequest.objects.bulk_create(
        TraceRequest(
            trace=trace,
            position=i,
            request_id=f"r{i}",
            arrival_s=0.5 * i,
            prompt=f"synthetic {i}",
            # Recorded lengths (native trace: its limit) 16 and 100: one request in each bucket.
            max_tokens=16 if i % 2 == 0 else 100,
            task="chat",
            traffic_class="interactive",
            prompt_tokens=40,
        )
        for i in range(n)
    )
    with override_settings(
        SPECREVIEW_OPENAI_SERVERS={SERVER: {"url": "http://127.0.0.1:9/v1", "credential": ""}}
    ):
        experiment = experiment_create(
            name="buckets (synthetic)",
            trace=trace,
            engine="openai",
            target_model="synthetic",
            baseline_engine_args={"server": SERVER, "check_server": False},
            candidates=[{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
            load_levels="1x",
            repeats=2,
            output_buckets="0:16,50:100",
        )
    now = timezone.now()
    for run in experiment.runs.select_related("arm").order_by("order"):
        tokens, base_gap, cand_gap, all_accepted = BUCKETS[run.output_bucket]
        rows = []
        for j, (tr, _request) in enumerate(run_requests(experiment=experiment, bucket=run.output_bucket)):
            jitter = 1 + 0.02 * (j % 3 - 1)  # medians land on the bucket's gap exactly
            if run.arm.is_baseline:
                drafted, accepted, chunks = [], [], [1] * tokens
                gap = base_gap * jitter
            else:
                drafted, accepted, chunks = _steps(tokens, all_accepted)
                gap = cand_gap * jitter
            first = tr.arrival_s + 0.05
            times, t = [first], first
            for size in chunks[1:]:
                t += gap * size  # a chunk of m tokens after m token gaps: TPOT is the gap
                times.append(t)
            rows.append(
                RequestResult(
                    run=run,
                    trace_request=tr,
                    request_id=tr.request_id,
                    scheduled_s=tr.arrival_s,
                    sent_s=tr.arrival_s,
                    first_token_s=first,
                    finish_s=times[-1],
                    chunk_times=times,
                    chunk_tokens=chunks,
                    num_output_tokens=tokens,
                    output_token_ids=list(range(tokens)),
                    output_text="x" * tokens,
                    finish_reason="length",
                    drafted=drafted,
                    accepted=accepted,
                )
            )
        RequestResult.objects.bulk_create(rows)
        RunTelemetry.objects.create(run=run, peak_memory_bytes=int(2e9), counters={})
        run.status, run.started_at, run.finished_at = "done", now, now
        run.wall_s = max(r.finish_s for r in rows)
        run.progress_done = run.progress_total = len(rows)
        run.save()
    experiment.status = "done"
    experiment.save()
    return experiment


@pytest.fixture
def experiment():
    from console.analysis.services import comparison_refresh

    experiment = bucketed_experiment()
    comparison_refresh(experiment_id=experiment.pk, n_boot=200)
    return experiment


def _headline(html: str) -> str:
    start = html.index('id="headline"')
    return html[start : html.index("</table>", start)]


def _row(html: str, arm: str) -> str:
    """The headline table's row of one arm (one load here)."""
    table = _headline(html)
    start = table.index(f"<td><b>{arm}</b>")
    return table[start : table.index("</tr>", start)]


def _figure(html: str, target: str) -> dict:
    """A figure's data as the page embeds it (console.figures)."""
    found = re.search(rf'data-target="{target}"[^>]*>(.*?)</script>', html, re.S)
    assert found, target
    return json.loads(found.group(1))


def _cells(row: str) -> list[str]:
    """Each cell's value: its text before the delta and floor spans."""
    return re.findall(r'<td class="num[^"]*">([^<]*)', row)


def test_it_lists_each_declared_bucket_in_the_slice_selector(viewer_client, experiment):
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    group = html[html.index('<optgroup label="declared output bucket (recorded tokens)">') :]
    group = group[: group.index("</optgroup>")]
    options = re.findall(r'<option value="([^"]+)"[^>]*>([^<]+)</option>', group)
    assert options == [
        ("run_output_bucket:0-50", f"0-50 ({N_PER_BUCKET} requests)"),
        ("run_output_bucket:50+", f"50+ ({N_PER_BUCKET} requests)"),
    ]


def test_a_buckets_view_shows_that_buckets_numbers_not_the_pooled_ones(viewer_client, experiment):
    url = f"/analysis/experiments/{experiment.pk}/"
    pooled = viewer_client.get(url).content.decode()
    assert _cells(_row(pooled, "baseline"))[-1] == f"{4 * N_PER_BUCKET} (0)"  # both buckets, 2 repeats
    columns = [
        "e2e p95",
        "TPOT p95",
        "$/successful task",
        "quality regressions",
        "goodput",
        "TTFT p95",
        "TPOT p50",
    ]
    tpot_p50 = columns.index("TPOT p50")
    acceptance = tpot_p50 + 2  # after e2e p99
    views = {}
    for label, (_tokens, base_gap, cand_gap, all_accepted) in BUCKETS.items():
        page = viewer_client.get(url, {"slice": f"run_output_bucket:{label}"})
        html = page.content.decode()
        assert page.status_code == 200
        assert f"Headline for declared output bucket (recorded tokens) = {label}" in html
        base, cand = _cells(_row(html, "baseline")), _cells(_row(html, "ngram k=2"))
        assert base[-1] == cand[-1] == f"{2 * N_PER_BUCKET} (0)"  # this bucket's requests only
        assert base[tpot_p50] == numbers.show(base_gap, "ms") and cand[tpot_p50] == numbers.show(
            cand_gap, "ms"
        )
        assert cand[acceptance] == ("100%" if all_accepted else "0%")
        # The bucket's own paired interval: the candidate's TPOT ratio against the baseline's.
        ratio = cand_gap / base_gap
        row = _row(html, "ngram k=2")
        assert re.search(rf'class="delta">{ratio:.2f}x \[', row), row
        title = _figure(html, "fig-tpot-load")["layout"]["title"]["text"].replace("<br>", " ")
        assert title == f"TPOT p50 at load 1x (declared output bucket (recorded tokens) = {label})"
        views[label] = cand
        text = visible_text(html)  # no repr, long float or internal key on the bucket's page
        assert findings(text, {"chat", "interactive", "baseline", "ngram k=2"}) == []
    # Pooled, the two buckets mix: neither bucket's acceptance nor its TPOT.
    pooled_cand = _cells(_row(pooled, "ngram k=2"))
    assert pooled_cand[acceptance] not in (views["0-50"][acceptance], views["50+"][acceptance])
    assert pooled_cand[tpot_p50] not in (views["0-50"][tpot_p50], views["50+"][tpot_p50])


def test_it_has_no_bucket_slice_without_declared_buckets(viewer_client):
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    plain = experiment_synthesize(n_requests=20, ks=(2,), loads="1x", repeats=1)
    comparison_refresh(experiment_id=plain.pk, n_boot=50)
    html = viewer_client.get(f"/analysis/experiments/{plain.pk}/").content.decode()
    assert "run_output_bucket" not in html and "declared output bucket" not in html


@pytest.mark.parametrize(
    ("labels", "sliced"),
    [(["0-64", "64+"], True), (["0-64", "0-64"], False), (["", ""], False), (None, False)],
)
def test_the_bucket_dimension_needs_two_declared_buckets(labels, sliced):
    from console.analysis.slices import RUN_BUCKET_DIMENSION, slice_dimensions, slices_assign
    from tests.analysis.builders import frame, request_row

    rows = [request_row(request_id="a"), request_row(request_id="b", run_id=2)]
    if labels is not None:  # one run per bucket, as the matrix makes them; "" = every request
        rows = [r | {RUN_BUCKET_DIMENSION: label} for r, label in zip(rows, labels, strict=True)]
    assigned = slices_assign(frame(*rows))
    assert (RUN_BUCKET_DIMENSION in slice_dimensions(assigned)) is sliced
    if labels == ["", ""]:
        assert assigned[RUN_BUCKET_DIMENSION].tolist() == [None, None]  # never a slice named ""
