"""The objects the authorisation tests fetch every route with: one experiment's runs (the last one
failed), a result of each of the first two runs with ``output`` as its text, a policy, and
signed decisions with guarded rollouts (one running, one paused, one decision with none)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

# A registered Prometheus nothing listens on: the world's rollouts are never evaluated.
WORLD_PROMETHEUS = {"world": {"url": "http://127.0.0.1:9", "bearer_token_file": ""}}


@contextlib.contextmanager
def world_rolled_back(django_db_blocker, build: Callable[[], Any]) -> Iterator[Any]:
    """What ``build`` makes, for a whole module, inside a transaction rolled back at its end; each
    test's own transaction (``db``) and each request's savepoint nest inside it."""
    from django.db import transaction
    from django.test.utils import override_settings

    with (
        django_db_blocker.unblock(),
        override_settings(
            PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
            SPECREVIEW_PROMETHEUS=WORLD_PROMETHEUS,
        ),
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


def rollouts_make(experiment: Any, *, author: Any, signer: Any, pool: str, reason: str, **decision: Any) -> dict[str, int]:
    """Three decisions on ``experiment`` that ``author`` drafted, submitted and ``signer`` approved:
    ``signed`` with a rollout running (paused and resumed once with ``reason``; its candidate's
    pool label is ``pool``; one look and its event), ``paused_rollout``'s decision with one paused
    (with ``reason``), and ``signed_idle`` with none, so a rollout may start."""
    from django.utils import timezone

    from console.decisions.triggers import trigger_evaluable
    from console.rollouts import services
    from console.rollouts.models import Look
    from tests.decisions.conftest import signed_make

    def start(signed: Any, candidate: str) -> Any:
        return services.rollout_start(
            decision=signed,
            actor=author,
            prometheus=next(iter(WORLD_PROMETHEUS)),
            candidate_pool=f'pool="{candidate}"',
            control_pool='pool="baseline"',
            stages=[{"share": 10, "minutes": 30}, {"share": 100, "minutes": 60}],
        )

    signed, paused, idle = (
        signed_make(experiment=experiment, author=author, signer=signer, **decision) for _ in range(3)
    )
    running = start(signed, pool)
    services.rollout_pause(rollout=running, actor=author, reason=reason)
    services.rollout_resume(rollout=running, actor=author)
    index = next(i for i, t in enumerate(running.triggers) if trigger_evaluable(t))
    look = Look.objects.create(
        rollout=running,
        trigger=index,
        at=timezone.now(),
        stage=0,
        candidate=0.031,
        control=0.025,
        observation=0.006,
        n=1,
        mean=0.006,
        p_value=1.0,
        state=Look.State.NOT_ENOUGH,
    )
    services.event_add(
        rollout=running,
        action="looked",
        details={"trigger": index, "state": look.state, "observation": look.observation, "n": look.n},
    )
    waiting = start(paused, "speculative")
    services.rollout_pause(rollout=waiting, actor=author, reason=reason)
    return {
        "signed": signed.pk,
        "rollout": running.pk,
        "paused_rollout": waiting.pk,
        "signed_idle": idle.pk,
    }
