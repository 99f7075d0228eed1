"""Draft length by batch size on the page, in JSON, from the API and the command line (issue 23):
the schedule the evidence rule derives from the stored comparison, its chart, each load's evidence,
the naive rule beside it, and a clear 'no schedule' when there is nothing to derive it from."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from console.analysis.models import ComparisonCache
from tests.support.pages import page_section

pytestmark = pytest.mark.django_db


@pytest.fixture
def experiment(db):
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=60, ks=(2, 4), loads="1x,2x", repeats=2)
    comparison_refresh(experiment_id=experiment.pk, n_boot=100)
    return experiment


def test_the_page_shows_the_schedule_its_chart_and_each_loads_evidence(experiment, viewer_client):
    from console.policies.schedule_page import experiment_schedule

    view = experiment_schedule(experiment=experiment)
    assert view.error is None and view.schedule is not None
    html = viewer_client.get(f"/policies/schedule/{experiment.pk}/").content.decode()
    bands = page_section(html, "bands")
    assert bands.count("<tr>") == len(view.schedule.bands) + 1  # + the header
    loads = page_section(html, "schedule-loads")
    for choice in (*view.schedule.loads, *view.schedule.unplaced):
        assert f"<td>{choice.load}</td>" in loads
    assert 'id="schedule-chart"' in html and 'id="naive"' in html
    if view.schedule.speculative_config:
        shown = json.loads(page_section(html, "schedule-config").split("<pre>")[1].split("</pre>")[0].replace("&quot;", '"'))
        assert shown == view.schedule.speculative_config


def test_the_json_the_api_and_the_command_give_the_same_schedule(experiment, engineer, viewer_client, api_token_for):
    download = json.loads(viewer_client.get(f"/policies/schedule/{experiment.pk}/schedule.json").content)
    api = viewer_client.get(f"/api/experiments/{experiment.pk}/schedule").json()
    out = io.StringIO()
    call_command("fit_policy", str(experiment.pk), "--user", engineer.username, "--export", "schedule", stdout=out)
    assert download == api == json.loads(out.getvalue())
    assert download["experiment_id"] == experiment.pk and download["bands"]
    assert [b["start"] for b in download["bands"]][0] == 1  # vLLM's first range starts at 1


def test_without_a_stored_comparison_it_says_why_instead_of_a_schedule(experiment, viewer_client):
    ComparisonCache.objects.filter(experiment=experiment).delete()
    html = viewer_client.get(f"/policies/schedule/{experiment.pk}/").content.decode()
    assert "No schedule: no comparison is stored yet" in page_section(html, "schedule-none")
    api = viewer_client.get(f"/api/experiments/{experiment.pk}/schedule").json()
    assert api["speculative_config"] is None and "no comparison" in api["reason"]
    assert viewer_client.get("/api/experiments/999999/schedule").status_code == 404
