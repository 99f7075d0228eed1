"""The objects the authorisation tests fetch every route with: one experiment's runs (the last one
failed), a result of each of the first two runs with ``output`` as its text, and a policy."""

from __future__ import annotations

from typing import Any


def runs_results_policy(experiment: Any, *, output: str, author: Any) -> dict[str, int]:
    """Ids of the failed run, a run, two results (of different runs) and a policy on ``experiment``."""
    from console.experiments.models import Run
    from console.policies.models import SlicePolicy
    from console.results.models import RequestResult

    runs = list(experiment.runs.order_by("order"))
    Run.objects.filter(pk=runs[-1].pk).update(status=Run.Status.FAILED, error="engine crashed")
    request = experiment.trace.requests.order_by("position").first()
    results = [
        RequestResult.objects.create(
            run=run,
            trace_request=request,
            request_id=request.request_id,
            scheduled_s=0.0,
            output_token_ids=[1, 2],
            output_text=output,
        )
        for run in runs[:2]
    ]
    policy = SlicePolicy.objects.create(
        experiment=experiment,
        baseline_arm="baseline",
        arms=["ngram"],
        metric="tpot_s",
        rules={"rules": []},
        rules_sha256="0" * 64,
        created_by=author,
    )
    return {
        "failed_run": runs[-1].pk,
        "run": runs[0].pk,
        "result_a": results[0].pk,
        "result_b": results[1].pk,
        "policy": policy.pk,
    }
