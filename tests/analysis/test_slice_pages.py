"""The comparison page's slices from the database: the selector redraws the table and charts for
a slice, refuses an unknown one, and the page shows per-class goodput, accelerator telemetry, the
first divergences and a flag on cross-vocabulary drafts."""

from __future__ import annotations

import re

import pytest

from console.results.models import RequestResult, RunTelemetry

pytestmark = pytest.mark.django_db


@pytest.fixture
def experiment():
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=50, ks=(2,), loads="1x", repeats=2, seed=7)
    comparison_refresh(experiment_id=experiment.pk, n_boot=200)
    return experiment


def _refresh(experiment):
    from console.analysis.services import comparison_refresh

    comparison_refresh(experiment_id=experiment.pk, n_boot=200, force=True)


def _request_counts(html: str) -> list[str]:
    section = html[html.index('id="headline"') : html.index("</table>", html.index('id="headline"'))]
    return re.findall(r'<td class="num">(\d+) \(\d+\)</td>', section)


def test_it_redraws_the_table_and_charts_for_the_chosen_slice(viewer_client, experiment):
    url = f"/analysis/experiments/{experiment.pk}/"
    html = viewer_client.get(url).content.decode()
    assert 'id="slice-form"' in html and '<option value="all" selected>' in html
    for key in ("task:code", "traffic_class:interactive", "output_bucket:32-128", "prompt_bucket:0-256"):
        assert f'<option value="{key}"' in html
    assert "turn_bucket" not in html  # a single-turn trace has no turn slice
    assert '<option value="task:code">code (10 requests)</option>' in html  # distinct requests
    assert _request_counts(html) == ["100", "100"]  # 50 requests x 2 repeats per arm
    page = viewer_client.get(url, {"slice": "task:code"})
    sliced = page.content.decode()
    assert page.status_code == 200
    assert '<option value="task:code" selected>' in sliced and "Headline for task = code" in sliced
    assert _request_counts(sliced) == ["20", "20"]  # every 5th request is code
    assert "TPOT p50 at load 1x (task = code)" in sliced and "TPOT p50 at load 1x (" not in html
    # The slice's own intervals and floors: 10 code requests are too few for a p95.
    assert "not measured (n too small): 10 requests, p95 needs 40" in sliced
    # Each reason once, in the legend under the table; the cells point to it (issue 22, point 5).
    headline = sliced[sliced.index('id="headline"') : sliced.index("</section>", sliced.index('id="headline"'))]
    assert headline.count("not measured (n too small): 10 requests, p95 needs 40") == 1
    assert 'id="not-measured-legend"' in headline and "not measured [1]" in headline
    assert sliced.count('class="floor">floor ±') >= 1
    # Whole-experiment sections stay whatever the slice.
    assert 'id="class-goodput"' in sliced and 'id="divergences"' in sliced and 'id="telemetry"' in sliced


def test_it_refuses_an_unknown_slice_with_a_form_error(viewer_client, experiment):
    page = viewer_client.get(f"/analysis/experiments/{experiment.pk}/", {"slice": "task:<nope>"})
    html = page.content.decode()
    assert page.status_code == 400
    assert 'id="slice-error"' in html and "&#x27;task:&lt;nope&gt;&#x27; is not a slice of this comparison" in html
    assert _request_counts(html) == ["100", "100"]  # the whole experiment, not half a page


def test_it_shows_goodput_per_traffic_class_with_intervals(viewer_client, experiment):
    html = viewer_client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()
    section = html[html.index('id="class-goodput"') : html.index('id="telemetry"')]
    assert section.count("<tr") == 1 + 4  # header, 2 classes x 2 arms
    # the difference and both bounds, each with its unit (console.numbers)
    assert re.search(r"-?\d[\d.]* req/s \[-?\d[\d.]* req/s, -?\d[\d.]* req/s\]", section)


def test_it_shows_accelerator_telemetry_or_not_measured(viewer_client, experiment):
    url = f"/analysis/experiments/{experiment.pk}/"
    html = viewer_client.get(url).content.decode()
    section = html[html.index('id="telemetry"') : html.index('id="divergences"')]
    assert section.count('<span class="badge na">not measured</span>') == 4  # utilisation and energy, both arms
    # NVML's utilisation is a percent (0-100), stored as the sampler's mean of it
    RunTelemetry.objects.filter(run__experiment=experiment).update(mean_util=42.0, energy_j=1500.0)
    _refresh(experiment)
    section = viewer_client.get(url).content.decode()
    section = section[section.index('id="telemetry"') : section.index('id="divergences"')]
    assert 'class="badge na"' not in section and "42.0%" in section and "3,000 J" in section  # 2 repeats
    assert "4200" not in section


def test_it_lists_first_divergences_with_a_side_by_side_link(engineer_client, experiment):
    url = f"/analysis/experiments/{experiment.pk}/"
    results = RequestResult.objects.filter(run__experiment=experiment).select_related("run__arm")
    base_of = {(r.request_id, r.run.repeat): r for r in results if r.run.arm.is_baseline}
    for r in results:  # synthetic outputs differ in length: make every candidate match first
        if not r.run.arm.is_baseline:
            b = base_of[(r.request_id, r.run.repeat)]
            r.output_token_ids, r.output_text = b.output_token_ids, b.output_text
            r.save(update_fields=["output_token_ids", "output_text"])
    _refresh(experiment)
    assert "Every compared candidate output matches its baseline" in engineer_client.get(url).content.decode()
    changed = RequestResult.objects.filter(run__experiment=experiment, run__arm__label="ngram k=2", request_id="s3")
    base = RequestResult.objects.get(run__experiment=experiment, run__arm__is_baseline=True, request_id="s3", run__repeat=0)
    for r in changed:
        ids = list(r.output_token_ids)
        r.output_token_ids = ids[:5] + [999] + ids[6:]
        r.output_text = r.output_text[:5] + "DIVERGED"
        r.save(update_fields=["output_token_ids", "output_text"])
    _refresh(experiment)
    html = engineer_client.get(url).content.decode()  # the texts: a viewer gets placeholders
    start = html.index('id="divergences"')
    section = html[start : html.index("</section>", start)]
    assert section.count("<tr><td>ngram k=2</td>") == 2  # both repeats of request s3
    assert "s3 #0" in section and '<td class="num">5</td>' in section and "DIVERGED" in section
    cand = changed.get(run__repeat=0)
    link = f"/analysis/results/{base.pk}/vs/{cand.pk}/"
    assert link in section and engineer_client.get(link).status_code == 200


def test_it_flags_an_arm_with_a_cross_vocabulary_draft(viewer_client, experiment):
    from console.experiments.models import Run

    url = f"/analysis/experiments/{experiment.pk}/"
    html = viewer_client.get(url).content.decode()
    assert 'id="cross-vocabulary"' not in html and "cross-vocabulary draft</span>" not in html
    Run.objects.filter(experiment=experiment, arm__label="ngram k=2").update(
        versions={"transformers": "4.57", "draft_tokenizer": "different (universal assisted)"}
    )
    html = viewer_client.get(url).content.decode()
    assert 'id="cross-vocabulary"' in html and "greedy-only" in html and "separate gate" in html
    headline = html[html.index('id="headline"') : html.index("</table>", html.index('id="headline"'))]
    assert headline.count("cross-vocabulary draft</span>") == 1  # the candidate's row, not the baseline's


def test_it_shows_sessions_and_a_turn_slice_only_for_a_multi_turn_trace(viewer_client, experiment):
    from console.traces.models import TraceRequest

    url = f"/analysis/experiments/{experiment.pk}/"
    assert 'id="sessions"' not in viewer_client.get(url).content.decode()
    # Make the trace's requests sessions of two turns: (0, 1), (2, 3), ...
    rows = list(TraceRequest.objects.filter(trace=experiment.trace).order_by("position"))
    for i, tr in enumerate(rows):
        tr.session_id, tr.turn = f"s{i // 2}", i % 2
        tr.think_time_s = 1.0 if tr.turn else 0.0
    TraceRequest.objects.bulk_update(rows, ["session_id", "turn", "think_time_s"])
    _refresh(experiment)
    html = viewer_client.get(url).content.decode()
    section = html[html.index('id="sessions"') : html.index("</section>", html.index('id="sessions"'))]
    # 25 sessions of 2 turns, replayed once per repeat (2): 50 sessions per arm and load, all multi-turn.
    assert '<td>baseline</td><td>1x</td><td class="num">50</td><td class="num">50</td><td class="num">2.00</td>' in section
    assert '<td>baseline</td><td>1x</td><td class="num">1</td><td class="num">50</td>' in section  # turn 1's row
    assert '<option value="turn_bucket:1"' in html
    sliced = viewer_client.get(url, {"slice": "turn_bucket:1"}).content.decode()
    assert "Headline for" in sliced and _request_counts(sliced) == ["50", "50"]  # 25 second turns x 2 repeats
