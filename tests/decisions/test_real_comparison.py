"""The gate on a comparison computed by console.analysis itself (a synthetic finished
experiment from tests.support.synthetic): the adapter reads the real schema."""

from __future__ import annotations

from console.decisions.models import Decision


def test_it_drafts_from_a_real_comparison_and_measures_the_gate(engineer_client):
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=60, repeats=2, seed=1)
    comparison_refresh(experiment_id=experiment.pk, n_boot=200)  # what the task does when runs end
    arm = experiment.arms.get(label="ngram k=4")
    response = engineer_client.post(
        "/decisions/new/",
        {
            "experiment": experiment.pk,
            "proposal": "enable",
            "candidate_arm": arm.pk,
            "traffic_class": "interactive",
        },
    )
    assert response.status_code == 302
    decision = Decision.objects.get()
    statuses = {c["key"]: c["status"] for c in decision.gate["criteria"]}
    for key in ("task_improvement", "latency_benefit", "load_stability"):
        assert statuses[key] in ("pass", "fail"), (key, decision.gate)
    # the synthetic trace has no JSON or tool requests and is not greedy: nothing to check
    assert statuses["quality"] == "not_measured"
    facts = decision.gate["facts"]
    assert {r["load"] for r in facts["comparisons"]} == {"1x", "2x"}
    assert facts["memory"]["candidate_peak_bytes"] > 0
    # 60 requests: p95 has enough requests beyond it, p99 (200 needed) does not
    assert "p95" in facts["stats_reported"] and "p99" not in facts["stats_reported"]
    items = {i["key"]: i["answer"] for i in decision.checklist}
    assert items["acceptance_by_prompt_type"] == "yes" and items["p95_p99"] == "no"
    assert items["quality_results"] == "no"
    page = engineer_client.get(f"/decisions/{decision.pk}/")
    assert f'href="/analysis/experiments/{experiment.pk}/"'.encode() in page.content


def test_it_refuses_to_draft_from_a_comparison_it_cannot_read(engineer_client, experiment):
    from console.analysis.models import ComparisonCache

    ComparisonCache.objects.create(experiment=experiment, key="old", data={"schema_version": 1, "headline": []})
    response = engineer_client.post(
        "/decisions/new/",
        {
            "experiment": experiment.pk,
            "proposal": "enable",
            "candidate_arm": experiment.arms.get(label="ngram").pk,
            "traffic_class": "interactive",
        },
    )
    assert response.status_code == 200
    assert b"comparison stored with schema version 1" in response.content and b"recompute it" in response.content
    assert not Decision.objects.exists()


def test_the_api_answers_409_when_the_stored_comparison_cannot_be_read(client, draft, engineer, api_token_for):
    import json

    from console.analysis.models import ComparisonCache

    ComparisonCache.objects.create(experiment=draft.experiment, key="old", data={"schema_version": 1})
    response = client.patch(
        f"/api/decisions/{draft.pk}",
        data=json.dumps({"rationale": "p95 TPOT down"}),
        content_type="application/json",
        **api_token_for(engineer),
    )
    assert response.status_code == 409
    assert "recompute it" in response.json()["error"]
    draft.refresh_from_db()
    assert draft.rationale == ""
