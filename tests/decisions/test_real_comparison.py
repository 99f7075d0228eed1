"""The gate on a comparison computed by console.analysis itself (a synthetic finished
experiment from console.analysis.synthetic): the adapter reads the real schema."""

from __future__ import annotations

from console.decisions.models import Decision


def test_it_drafts_from_a_real_comparison_and_measures_the_gate(engineer_client):
    from console.analysis.selectors import comparison_for_experiment
    from console.analysis.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=60, repeats=2, seed=1)
    comparison_for_experiment(experiment=experiment, n_boot=200)  # computed once, cached for the view
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
    for key in ("task_improvement", "latency_benefit", "quality", "load_stability"):
        assert statuses[key] in ("pass", "fail"), (key, decision.gate)
    facts = decision.gate["facts"]
    assert {r["load"] for r in facts["comparisons"]} == {"1x", "2x"}
    assert facts["memory"]["candidate_peak_bytes"] > 0
    assert {"p95", "p99"} <= set(facts["stats_reported"])
    items = {i["key"]: i["answer"] for i in decision.checklist}
    assert items["p95_p99"] == items["acceptance_by_prompt_type"] == items["quality_results"] == "yes"
    page = engineer_client.get(f"/decisions/{decision.pk}/")
    assert f'href="/analysis/experiments/{experiment.pk}/"'.encode() in page.content
