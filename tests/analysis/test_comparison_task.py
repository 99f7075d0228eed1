"""The comparison is computed by a task when an experiment's last run ends; a page shows what is
stored, or the computation's progress, and never reads the results itself."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from tests.conftest import wait_for

RESULTS_TABLE = "analysis_requestresult"


def _reads_results(queries) -> bool:
    return any(RESULTS_TABLE in q["sql"] for q in queries)


@pytest.mark.django_db
def test_it_shows_the_stage_of_a_computation_under_way_without_computing(viewer_client, monkeypatch):
    from console.analysis import services
    from console.analysis.models import ComparisonCache
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=30, ks=(2,), loads="1x", repeats=1)
    url = f"/analysis/experiments/{experiment.pk}/"
    seen: dict[str, str] = {}
    real = services.comparison_compute_for

    def observed(*, progress, **kwargs):
        def report(stage: str) -> None:
            progress(stage)
            # what a user sees while the worker is at this stage
            with CaptureQueriesContext(connection) as queries:
                page = viewer_client.get(url)
            assert page.status_code == 200 and not _reads_results(queries.captured_queries)
            seen[stage] = page.content.decode()

        return real(progress=report, **kwargs)

    monkeypatch.setattr(services, "comparison_compute_for", observed)
    services.comparison_refresh(experiment_id=experiment.pk, n_boot=100)
    middle = seen["computing metrics and intervals"]
    assert 'id="comparison-progress"' in middle and "step 2 of 3" in middle
    assert '<meta http-equiv="refresh"' in middle and "being computed" in middle
    assert "step 1 of 3, loading results" in seen["loading results"]
    # done: the stored comparison, no progress left behind
    stored = ComparisonCache.objects.get(experiment=experiment)
    assert stored.data and stored.progress == {}
    html = viewer_client.get(url).content.decode()
    assert 'id="comparison-progress"' not in html and 'id="primary"' in html


def test_it_computes_on_a_worker_when_the_last_run_ends_and_pages_only_read_it(
    celery_worker_proc, viewer_client
):
    from console.analysis.models import ComparisonCache
    from console.analysis.selectors import comparison_state
    from console.experiments.runs import experiment_status_refresh
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=40, ks=(2,), loads="1x", repeats=1)
    assert not ComparisonCache.objects.exists()
    url = f"/analysis/experiments/{experiment.pk}/"
    with CaptureQueriesContext(connection) as queries:
        before = viewer_client.get(url)
    assert before.status_code == 200 and b"being computed" in before.content
    assert not _reads_results(queries.captured_queries)
    with transaction.atomic():  # what run_finish does after the last run's rows are stored
        experiment_status_refresh(experiment_id=experiment.pk)
    wait_for(
        lambda: comparison_state(experiment=experiment) == "ready", timeout=300, what="comparison computed"
    )
    computed_at = ComparisonCache.objects.get(experiment=experiment).computed_at
    for _ in range(3):
        with CaptureQueriesContext(connection) as queries:
            page = viewer_client.get(url)
        assert page.status_code == 200 and b'id="primary"' in page.content
        assert b"being computed" not in page.content
        assert not _reads_results(queries.captured_queries)
    assert ComparisonCache.objects.get(experiment=experiment).computed_at == computed_at
