"""The comparison page from the database: a deliberately broken candidate shows its regressions."""

from __future__ import annotations

import pytest

from console.analysis.models import RequestResult
from console.traces.models import TraceRequest

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "x", "schema": {"type": "object", "required": ["a"]}},
}


def test_it_lists_every_regression_of_a_candidate_that_breaks_json(viewer_client):
    from console.analysis.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=40, ks=(2, 4), loads="1x", repeats=1)
    json_requests = TraceRequest.objects.filter(trace=experiment.trace, task="json")
    json_requests.update(response_format=SCHEMA)
    results = RequestResult.objects.filter(trace_request__in=json_requests)
    results.update(output_text='{"a": 1}', json_valid=True, schema_valid=True)
    broken = results.filter(run__arm__label="ngram k=4")
    broken.update(output_text='{"a": 1', json_valid=False, schema_valid=False)  # truncated JSON
    expected = broken.count()
    assert expected == json_requests.count() == 8

    page = viewer_client.get(f"/analysis/experiments/{experiment.pk}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert f'<span class="badge fail">{expected}</span>' in html
    summary = viewer_client.get(f"/api/experiments/{experiment.pk}/comparison").json()
    regressions = summary["quality"]["regressions"]
    assert len(regressions) == expected and {r["arm"] for r in regressions} == {"ngram k=4"}
    row = regressions[0]
    link = f"/analysis/results/{row['baseline_result_id']}/vs/{row['candidate_result_id']}/"
    assert link in html
    side_by_side = viewer_client.get(link)
    assert side_by_side.status_code == 200 and b"{&quot;a&quot;: 1" in side_by_side.content
    k4 = next(h for h in summary["headline"] if h["arm"] == "ngram k=4")
    assert k4["n_regressions"] == expected
    k2 = next(h for h in summary["headline"] if h["arm"] == "ngram k=2")
    assert k2["n_regressions"] == 0
