"""The periodic look at a running rollout's triggers (``workers.rollouts_evaluate`` calls
:func:`rollouts_evaluate_due` every ``SPECREVIEW_ROLLOUT_EVALUATE_EVERY_S``).

Each trigger is looked at once per window, over non-overlapping windows that end at
``started_at + k * window_min`` (a look that is due after the worker was away is taken then, at
its own time: Prometheus answers for any instant it kept). A look runs the trigger's query on
the candidate's pool and, compared with the control, on the control's; the observation
(candidate minus control, or the candidate's value) joins the trigger's earlier ones and the
sequential test (``rollouts.sequential``) says not enough, ok or breach. A breach pauses the
rollout ("rollback recommended"), notifies, and for a trigger whose action is ``rollback``
calls the operator's revert webhook. Every look is a row (``Look``) and an event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.decisions.triggers import trigger_evaluable
from console.decisions.words import trigger_condition, trigger_value
from console.rollouts.models import Look, Rollout
from console.rollouts.notifications import notify, revert_request
from console.rollouts.prometheus import PrometheusError, instant_query, query_render
from console.rollouts.sequential import sequential_evaluate
from console.rollouts.services import event_add, rollout_archive

log = logging.getLogger(__name__)

# Looks one call takes per trigger at most: a worker back after a long absence catches up over
# several calls instead of holding the row lock for minutes.
CATCH_UP_LOOKS = 30

Query = Callable[..., float | None]


def _server(name: str) -> tuple[str, str | None]:
    entry = settings.SPECREVIEW_PROMETHEUS.get(name)
    if entry is None:
        raise PrometheusError(f"Prometheus {name!r} is no longer registered (SPECREVIEW_PROMETHEUS)")
    token = None
    if entry.get("bearer_token_file"):
        try:
            token = Path(entry["bearer_token_file"]).read_text().strip()
        except OSError as exc:
            raise PrometheusError(f"Prometheus {name!r}: its token file cannot be read ({exc.strerror})") from None
    return entry["url"], token


def _look(rollout: Rollout, index: int, trigger: dict[str, Any], *, at: datetime, query: Query) -> Look:
    """One look at one trigger over the window ending ``at``."""
    values: dict[str, float | None] = {"candidate": None, "control": None}
    state, message = None, ""
    try:
        url, token = _server(rollout.prometheus)
        pools = {"candidate": rollout.candidate_pool}
        if trigger["compare"] == "control":
            pools["control"] = rollout.control_pool
        for who, pool in pools.items():
            text = query_render(trigger["query"], pool=pool, window_min=trigger["window_min"])
            values[who] = query(url=url, query=text, at=at.timestamp(), bearer_token=token)
    except (PrometheusError, ValueError) as exc:
        state, message = Look.State.ERROR, str(exc)[:1000]
    observation = None
    if state is None and values["candidate"] is not None:
        if trigger["compare"] == "absolute":
            observation = values["candidate"]
        elif values["control"] is not None:
            observation = values["candidate"] - values["control"]
    earlier: list[float] = [
        float(v)
        for v in rollout.looks.filter(trigger=index, observation__isnull=False).order_by("at").values_list("observation", flat=True)
        if v is not None
    ]
    result = sequential_evaluate(
        earlier + ([observation] if observation is not None else []),
        op=trigger["op"], threshold=float(trigger["threshold"]), alpha=rollout.alpha,
        min_samples=int(trigger["min_samples"]),
    )
    if state is None and observation is None:
        state, message = Look.State.NO_DATA, "the query returned no number for " + (
            "the candidate's pool" if values["candidate"] is None else "the control's pool"
        )
    look = Look.objects.create(
        rollout=rollout, trigger=index, at=at, stage=rollout.stage, observation=observation,
        n=result.n, mean=result.mean, p_value=result.p_value, state=state or result.state, message=message,
        **values,
    )
    event_add(rollout=rollout, action="looked", at=timezone.now(), details={
        "trigger": index, "metric": trigger["metric"], "window_end": at.isoformat(), "state": look.state,
        "candidate": look.candidate, "control": look.control, "observation": observation, "n": result.n,
        "p_value": result.p_value, "message": message,
    })
    return look


def _due(rollout: Rollout, index: int, trigger: dict[str, Any], now: datetime) -> list[datetime]:
    window = timedelta(minutes=float(trigger["window_min"]))
    last = rollout.looks.filter(trigger=index).order_by("-at").values_list("at", flat=True).first()
    due, out = (last or rollout.started_at) + window, list[datetime]()
    while due <= now and len(out) < CATCH_UP_LOOKS:
        out.append(due)
        due += window
    return out


def _breach(rollout: Rollout, breached: list[tuple[int, dict[str, Any], Look]]) -> None:
    names = "; ".join(
        f"{t['metric']}: mean {trigger_value(look.mean, t['unit'], difference=t['compare'] == 'control')} over {look.n} looks, {trigger_condition(t)}"
        f" (always-valid p = {look.p_value:.3g} at alpha {rollout.alpha:g})"
        for _, t, look in breached
    )
    rollout.state, rollout.reason = Rollout.State.BREACHED, f"rollback recommended: {names}"[:2000]
    rollout.save(update_fields=["state", "reason"])
    event_add(rollout=rollout, action="breach", details={"triggers": [i for i, _, _ in breached], "reason": rollout.reason})
    notify(event="rollout.breach", rollout=rollout)
    if any(t["action"] == "rollback" for _, t, _ in breached) and revert_request(rollout=rollout):
        event_add(rollout=rollout, action="revert_requested", details={"targets": len(settings.SPECREVIEW_ROLLOUT_REVERT_URLS)})


def _advance(rollout: Rollout, now: datetime) -> None:
    """Move through the stages whose time is up; past the last, the rollout is complete."""
    while rollout.state == Rollout.State.RUNNING:
        minutes = float(rollout.stages[rollout.stage]["minutes"])
        ends = rollout.stage_started_at + timedelta(minutes=minutes)
        if ends > now:
            return
        if rollout.stage + 1 < len(rollout.stages):
            rollout.stage += 1
            rollout.stage_started_at = ends
            rollout.save(update_fields=["stage", "stage_started_at"])
            event_add(rollout=rollout, action="stage", details={"stage": rollout.stage, **rollout.stages[rollout.stage]})
        else:
            rollout.state, rollout.ended_at = Rollout.State.COMPLETED, now
            rollout.save(update_fields=["state", "ended_at"])
            event_add(rollout=rollout, action="completed")
            rollout_archive(rollout=rollout)
            notify(event="rollout.completed", rollout=rollout)


def rollout_evaluate(*, rollout_id: int, now: datetime | None = None, query: Query = instant_query) -> Rollout | None:
    """Take every look that is due on one running rollout, then act on a breach or move on a
    stage. None when another worker holds the rollout (it is being evaluated) or it is gone."""
    now = now or timezone.now()
    with transaction.atomic():
        rollout = Rollout.objects.select_for_update(skip_locked=True).select_related(
            "decision__experiment__trace"
        ).filter(pk=rollout_id).first()
        if rollout is None or rollout.state != Rollout.State.RUNNING:
            return rollout
        breached = []
        for index, trigger in enumerate(rollout.triggers):
            if not trigger_evaluable(trigger):
                continue
            for at in _due(rollout, index, trigger, now):
                look = _look(rollout, index, trigger, at=at, query=query)
                if look.state == Look.State.BREACH:
                    breached.append((index, trigger, look))
                    break
        rollout.evaluated_at = now
        rollout.save(update_fields=["evaluated_at"])
        if breached:
            _breach(rollout, breached)
        else:
            _advance(rollout, now)
        return rollout


def rollouts_evaluate_due(*, now: datetime | None = None, query: Query = instant_query) -> int:
    """Evaluate every running rollout; how many were looked at."""
    count = 0
    for pk in Rollout.objects.filter(state=Rollout.State.RUNNING).values_list("pk", flat=True):
        try:
            if rollout_evaluate(rollout_id=pk, now=now, query=query) is not None:
                count += 1
        except Exception:  # one rollout's failure must not stop the others' looks
            log.exception("rollout %s: evaluation failed", pk)
    return count
