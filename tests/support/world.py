"""The objects the authorisation tests fetch every route with: one experiment's runs (the last one
failed), a result of each of the first two runs with ``output`` as its text, and a policy."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def world_rolled_back(django_db_blocker, build: Callable[[], Any]) -> Iterator[Any]:
    """What ``build`` makes, for a whole module, inside a transaction rolled back at its end; each
    test's own transaction (``db``) and each request's savepoint nest inside it."""
    from django.db import transaction
    from django.test.utils import override_settings

    with (
        django_db_blocker.unblock(),
        override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]),
        transaction.atomic(),
    ):
        yield build()
        transaction.set_rollback(True)


def policy_make(experiment: Any, *, author: Any) -> Any:
    """A stored slice policy on ``experiment`` with no rules (never scored on a holdout)."""
    from console.policies.models import SlicePolicy

    return SlicePolicy.objects.create(
        experiment=experiment,
        baseline_arm="baseline",
        arms=["ngram"],
        metric="tpot_s",
        rules={"rules": []},
        rules_sha256="0" * 64,
        created_by=author,
    )


def runs_results_policy(experiment: Any, *, output: str, author: Any) -> dict[str, int]:
    """Ids of the failed run, a run, two results (of different runs) and a policy on ``experiment``."""
    from console.experiments.models import Run
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
    policy = policy_make(experiment, author=author)
    return {
        "failed_run": runs[-1].pk,
        "run": runs[0].pk,
        "result_a": results[0].pk,
        "result_b": results[1].pk,
        "policy": policy.pk,
    }
