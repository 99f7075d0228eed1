"""The comparison page from the database: a deliberately broken candidate shows its regressions."""

from __future__ import annotations

import re

import pytest

from console.results.models import RequestResult
from console.traces.models import TraceRequest

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "x", "schema": {"type": "object", "required": ["a"]}},
}


def test_it_lists_every_regression_of_a_candidate_that_breaks_json(viewer_client, engineer_client):
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=40, ks=(2, 4), loads="1x", repeats=1)
    json_requests = TraceRequest.objects.filter(trace=experiment.trace, task="json")
    json_requests.update(response_format=SCHEMA)
    results = RequestResult.objects.filter(trace_request__in=json_requests)
    results.update(output_text='{"a": 1}', json_valid=True, schema_valid=True)
    broken = results.filter(run__arm__label="ngram k=4")
    broken.update(output_text='{"a": 1', json_valid=False, schema_valid=False)  # truncated JSON
    expected = broken.count()
    assert expected == json_requests.count() == 8
    from console.analysis.services import comparison_refresh

    comparison_refresh(experiment_id=experiment.pk, n_boot=200)  # what the task does when runs end
    page = viewer_client.get(f"/analysis/experiments/{experiment.pk}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert f'<span class="badge fail">{expected}</span>' in html
    assert "priced per busy accelerator-hour" in html  # the cost basis beside the cost cells
    summary = viewer_client.get(f"/api/experiments/{experiment.pk}/comparison").json()
    assert summary["cost_basis"] == "busy_time"
    regressions = summary["quality"]["regressions"]
    assert len(regressions) == expected and {r["arm"] for r in regressions} == {"ngram k=4"}
    row = regressions[0]
    link = f"/analysis/results/{row['baseline_result_id']}/vs/{row['candidate_result_id']}/"
    assert link in html
    side_by_side = engineer_client.get(link)  # the outputs themselves: a viewer gets placeholders
    assert side_by_side.status_code == 200 and b"{&quot;a&quot;: 1" in side_by_side.content
    k4 = next(h for h in summary["headline"] if h["arm"] == "ngram k=4")
    assert k4["n_regressions"] == expected
    k2 = next(h for h in summary["headline"] if h["arm"] == "ngram k=2")
    assert k2["n_regressions"] == 0


def test_it_never_computes_the_comparison_on_a_page_get(viewer_client, engineer_client):
    from console.analysis.models import ComparisonCache
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=30, ks=(2,), loads="1x", repeats=1)
    ComparisonCache.objects.all().delete()
    page = viewer_client.get(f"/analysis/experiments/{experiment.pk}/")
    assert page.status_code == 200 and b"being computed" in page.content
    assert not ComparisonCache.objects.exists()
    assert viewer_client.get(f"/api/experiments/{experiment.pk}/comparison").status_code == 409
    # a viewer cannot ask for it; an engineer can (a task on the broker)
    assert viewer_client.post(f"/analysis/experiments/{experiment.pk}/recompute/").status_code == 403


def test_it_shows_the_noise_floor_in_each_cell_and_marks_exploratory_cells(viewer_client):
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    two = experiment_synthesize(n_requests=60, ks=(2,), loads="1x", repeats=2, seed=3)
    comparison_refresh(experiment_id=two.pk, n_boot=200)
    html = viewer_client.get(f"/analysis/experiments/{two.pk}/").content.decode()
    assert 'id="primary"' in html and "declared before the run" in html
    assert html.count('class="floor">floor ±') >= 4  # TTFT p95, TPOT p50 and p95, e2e p95
    assert "exploratory" in html
    # the A/A table names each floor's unit: latencies in ms or s, shares of requests in
    # percentage points, and the floor relative to the baseline's statistic in %
    table = html[html.index('id="noise"') :]
    table = table[: table.index("</section>")]
    assert re.search(r'<td>e2e latency p95</td><td class="num">2</td><td class="num">±[0-9.]+ m?s</td>', table)
    assert re.search(r'<td class="num">±[0-9.]+%</td>', table)
    assert re.search(r'<td>success mean</td><td class="num">2</td><td class="num">±[0-9.]+ pp</td>', table)
    # the candidate's acceptance with its own interval (not a paired comparison: no verdict)
    assert re.search(r'<td class="num ">[0-9.]+%<span class="delta">95% CI \[[0-9.]+%, [0-9.]+%\]</span></td>', html)
    one = experiment_synthesize(n_requests=60, ks=(2,), loads="1x", repeats=1, seed=4)
    comparison_refresh(experiment_id=one.pk, n_boot=200)
    html = viewer_client.get(f"/analysis/experiments/{one.pk}/").content.decode()
    assert 'class="floor">no noise floor' in html and 'class="floor">floor ±' not in html


def test_it_flags_a_candidate_whose_server_counters_show_no_draft(viewer_client):
    from console.analysis.services import comparison_refresh
    from console.experiments.models import Run
    from console.results.models import RunTelemetry
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=30, ks=(2, 4), loads="1x", repeats=1, seed=5)
    # "ngram k=4" went to a server started without speculation: no steps per request, and
    # its /metrics had no spec-decode counters (read as zeros, see openai_http).
    RequestResult.objects.filter(run__arm__label="ngram k=4").update(drafted=[], accepted=[])
    silent = {"spec_decode_num_drafts": 0, "spec_decode_num_draft_tokens": 0, "spec_decode_num_accepted_tokens": 0}
    for run in Run.objects.filter(experiment=experiment, arm__label="ngram k=4"):
        RunTelemetry.objects.update_or_create(run=run, defaults={"counters": silent | {"spec_decode": "not configured"}})
    # "ngram k=2" has no steps either, but its server counted drafts: run-level acceptance.
    RequestResult.objects.filter(run__arm__label="ngram k=2").update(drafted=[], accepted=[])
    counted = {"spec_decode_num_drafts": 40, "spec_decode_num_draft_tokens": 80, "spec_decode_num_accepted_tokens": 60}
    for run in Run.objects.filter(experiment=experiment, arm__label="ngram k=2"):
        RunTelemetry.objects.update_or_create(run=run, defaults={"counters": counted})
    comparison_refresh(experiment_id=experiment.pk, n_boot=100)
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    section = html[html.index('id="speculation"') :]
    section = section[: section.index("</section>")]
    k4 = section[section.index("ngram k=4") :].split("</tr>")[0]
    assert "server did not speculate" in k4 and "run-level (server counters)" in k4
    k2 = section[section.index("ngram k=2") :].split("</tr>")[0]
    assert "server did not speculate" not in k2 and "run-level (server counters)" in k2
    # 60 / 80 accepted, as a percentage like the headline's acceptance; 1 + 60 / 40
    assert "75%" in k2 and "0.750" not in k2 and "2.50" in k2


def test_it_shows_what_the_drafter_costs_the_kv_cache_per_arm(viewer_client):
    from console.analysis.services import comparison_refresh
    from console.experiments.models import Run
    from console.results.models import RunTelemetry
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=30, ks=(2,), loads="1x", repeats=2, seed=5)
    for run in Run.objects.filter(experiment=experiment).select_related("arm"):
        base = run.arm.is_baseline
        kv = {  # what workers.telemetry.KvSampler stores for a vLLM run
            "kv_cache_tokens": 16000 if base else 12000,
            "preemptions": (2 if base else 7) + run.repeat,
            "kv_usage_peak": 0.5 if base else 0.875,
            "kv_usage_mean": 0.25,
            "running_peak": 8,
            "waiting_peak": 0 if base else 3,
        }
        RunTelemetry.objects.update_or_create(run=run, defaults={"counters": {"kv": kv}})
    comparison_refresh(experiment_id=experiment.pk, n_boot=100)
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    section = html[html.index('id="kv-cache"') :]
    section = section[: section.index("</section>")]
    base_row, cand_row = section.split("<tbody>")[1].split("</tr>")[:2]
    assert "baseline" in base_row and "16,000" in base_row and "2.50" in base_row and "(2, 3)" in base_row
    assert "12,000" in cand_row and "25%" in cand_row  # a quarter of the KV capacity lost
    assert "87.5%" in cand_row and "7.50" in cand_row and "(7, 8)" in cand_row


def test_it_has_no_kv_cache_block_for_an_engine_that_preallocates_nothing(viewer_client):
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=30, ks=(2,), loads="1x", repeats=1, seed=5)
    comparison_refresh(experiment_id=experiment.pk, n_boot=100)
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    assert 'id="kv-cache"' not in html
    # the memory plot, and where each arm's figure came from: the worker process (engine in process)
    sources = html[html.index('id="memory-sources"') :]
    assert "the worker process (engine, models and replay client" in sources[: sources.index("</section>")]


def test_the_run_page_shows_the_number_format_chosen_and_each_requests_real_prompt_length(viewer_client):
    from console.experiments.models import Run
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=3, ks=(2,), loads="1x", repeats=1)
    run = experiment.runs.order_by("order").first()
    first, second, third = RequestResult.objects.filter(run=run).select_related("trace_request").order_by(
        "scheduled_s"
    )
    choice = {
        "dtype": "float32",
        "source": "probe",
        "reason": "float32: CPU lacks native bf16 (no avx512_bf16/amx_bf16/bf16 flag); probe: fp32 prefill 812 "
        "tok/s, decode 15.9 tok/s vs bf16 prefill 96 tok/s, decode 4.2 tok/s",
        "probe": {
            "float32": {"prefill_tok_s": 812.0, "decode_tok_s": 15.9, "prefill_tokens": 128, "decode_tokens": 16},
            "bfloat16": {"prefill_tok_s": 96.0, "decode_tok_s": 4.2, "prefill_tokens": 16, "decode_tokens": 3},
        },
        "probe_s": 9.5,
    }
    Run.objects.filter(pk=run.pk).update(
        hardware={"cpu_model": "x", "dtype": choice},
        prompt_tokens={
            first.request_id: {"n": 4321, "source": "engine"},
            second.request_id: {"n": 17, "source": "trace"},
        },
    )
    html = viewer_client.get(f"/analysis/runs/{run.pk}/").content.decode()
    assert "Number format: float32" in html
    assert "CPU lacks native bf16" in html and "fp32 prefill 812 tok/s" in html
    assert "Probed at the start of this run (9.50 s" in html
    assert "float32 (chosen)" in html
    assert ">4321</td>" in html  # the engine's count, plain
    assert ">~17</span>" in html  # the trace's count, marked
    assert f">~{third.trace_request.prompt_tokens}</span>" in html  # no count stored: the trace's
    # A pinned run says so and shows no probe table.
    Run.objects.filter(pk=run.pk).update(
        hardware={"dtype": {"dtype": "bfloat16", "source": "pinned", "reason": "bfloat16: pinned by engine_args.dtype"}}
    )
    html = viewer_client.get(f"/analysis/runs/{run.pk}/").content.decode()
    assert "Number format: bfloat16" in html and "nothing was probed" in html and "(chosen)" not in html


def test_the_run_page_shows_its_speculative_config_as_json_not_a_python_repr(viewer_client):
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=3, ks=(2,), loads="1x", repeats=1)
    run = experiment.runs.filter(arm__is_baseline=False).first()
    html = viewer_client.get(f"/analysis/runs/{run.pk}/").content.decode()
    config = html[html.index("<b>Config</b>") :]
    config = config[: config.index("</pre>")]
    assert "&quot;num_speculative_tokens&quot;: 2" in config and "&#x27;" not in config, config
    baseline = experiment.runs.filter(arm__is_baseline=True).first()
    assert "baseline (no speculation)" in viewer_client.get(f"/analysis/runs/{baseline.pk}/").content.decode()


def test_the_comparison_opens_with_the_answer_in_plain_words(viewer_client):
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=40, ks=(2, 4), loads="1x", repeats=2, seed=3)
    comparison_refresh(experiment_id=experiment.pk, n_boot=100)
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    assert html.index('id="verdict"') < html.index('id="primary"') < html.index('id="headline"')
    answer = html[html.index('id="verdict"') : html.index("</section>", html.index('id="verdict"'))]
    for arm in experiment.arms.filter(is_baseline=False):
        assert f"{arm.label} " in answer
    assert "TPOT p95" in answer and "tpot_s" not in answer and ("at 1x" in answer)


def test_the_headline_shows_goodput_with_its_unit():
    from console.analysis.comparison_page import _fmt

    # through the one formatting layer: three significant digits, the unit after the number
    assert _fmt(0.36, "req/s") == "0.360 req/s" and _fmt(1.5, "") == "1.50" and _fmt(None, "req/s") == "—"


def test_a_second_view_of_the_comparison_reads_no_stored_comparison_and_shows_the_same_evidence(
    viewer_client, engineer_client, approver_client
):
    """Issue 22, finding 9: the comparison page's evidence is rendered once per stored comparison
    and slice, then served from the cache (the stored JSON is not even fetched), the same for every
    viewer, while the parts that depend on the viewer (its buttons) still do."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=40, repeats=2)
    comparison_refresh(experiment_id=experiment.pk, n_boot=100)
    url = f"/analysis/experiments/{experiment.pk}/"
    first = engineer_client.get(url).content.decode()
    # one cached body per stored comparison, slice and raw-text permission (issue 24)
    with CaptureQueriesContext(connection) as queries:
        second = approver_client.get(url).content.decode()
    assert not [q for q in queries.captured_queries if '"data"' in q["sql"] and "comparisoncache" in q["sql"]]
    body = first[first.index('id="verdict"') : first.index("<footer>")]
    assert body in second
    shown = viewer_client.get(url).content.decode()
    assert "Draft decision" in second and "Draft decision" not in shown  # the engineers' button only
