"""Reads of rollouts: the list of a decision's, and one rollout as its page and the API show it:
each trigger's latest look against its threshold, and production against the prediction (the
effect the rollout observes beside the interval the decision signed, where the trigger measures
what the evaluation measured)."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
from django.db.models import QuerySet

from console.accounts import teams
from console.decisions.models import Decision
from console.decisions.triggers import trigger_evaluable
from console.decisions.words import trigger_condition
from console.policies.pairs import benefit_interval
from console.rollouts import exports
from console.rollouts.models import Look, Rollout, RolloutEvent
from console.rollouts.sequential import looks_needed

# What a default trigger's query measures, in the comparison's own words (metric, statistic):
# a p95 of one of vLLM's latency histograms is the evaluation's p95 of the same latency.
_HISTOGRAMS = {
    "time_per_output_token": "tpot_s",
    "inter_token_latency": "tpot_s",
    "e2e_request_latency": "e2e_s",
    "time_to_first_token": "ttft_s",
}
_QUANTILE = re.compile(r"histogram_quantile\(\s*0?\.(5|95|99)\s*,")
# vLLM's spec-decode counters, accepted over drafted: the evaluation's acceptance rate.
_ACCEPTANCE = ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total")
ACCEPTANCE = ("acceptance_rate", "rate")
SERIES_LOOKS = 60  # the page's sparkline: the last looks
EXPORT_STAGES = "10:10,50:10,100:10"


def rollouts_of(*, decision: Decision, user: Any) -> QuerySet[Rollout]:
    return teams.visible(Rollout.objects.filter(decision=decision), user).select_related("started_by")


def predicted_by(trigger: dict[str, Any]) -> tuple[str, str] | None:
    """(metric, stat) of the comparison a trigger's query measures, or None: a quantile of one
    of vLLM's latency histograms against the control (a paired delta was signed), or vLLM's
    accepted over drafted tokens on the candidate alone (``ACCEPTANCE``: the candidate's rate
    and its interval were signed)."""
    query = str(trigger.get("query") or "")
    if trigger.get("compare") == "absolute" and all(name in query for name in _ACCEPTANCE):
        return ACCEPTANCE
    quantile = _QUANTILE.search(query)
    if trigger.get("compare") != "control" or not quantile:
        return None
    for name, metric in _HISTOGRAMS.items():
        if f"vllm:{name}" in query:
            return metric, f"p{quantile.group(1)}"
    return None


def _prediction(decision: Decision, trigger: dict[str, Any]) -> list[dict[str, Any]]:
    """What the decision signed, per load: the paired deltas (candidate minus baseline, seconds)
    of the promised class, ``{"load", "delta", "lo", "hi"}``; for the acceptance rate the
    candidate's own rate and its interval, ``{"load", "value", "lo", "hi"}``."""
    key = predicted_by(trigger)
    if key is None:
        return []
    facts = (decision.gate or {}).get("facts") or {}
    if key == ACCEPTANCE:
        candidate = (decision.gate or {}).get("candidate_arm")
        return [
            {"load": h.get("load"), "value": h.get("acceptance_rate"), "lo": h.get("acceptance_rate_lo"), "hi": h.get("acceptance_rate_hi")}
            for h in facts.get("headline") or []
            if h.get("arm") == candidate and h.get("acceptance_rate") is not None
        ]
    rows = facts.get("comparisons") or []
    return [
        {"load": r.get("load"), "delta": r.get("delta"), "lo": r.get("delta_lo"), "hi": r.get("delta_hi")}
        for r in rows
        if (r.get("metric"), r.get("stat")) == key and r.get("traffic_class") == decision.traffic_class
    ]


def _observed(values: list[float]) -> dict[str, Any] | None:
    """Mean of the observations and a 95% t interval (per look; not adjusted for the repeated
    looks: the breach decision is the sequential test's, this is for reading)."""
    if not values:
        return None
    mean, lo, hi = benefit_interval(np.asarray(values, dtype=float), stat="mean")
    return {"n": len(values), "mean": mean, "lo": lo if math.isfinite(lo) else None, "hi": hi if math.isfinite(hi) else None}


def trigger_rows(rollout: Rollout) -> list[dict[str, Any]]:
    looks: dict[int, list[Look]] = {}
    for look in rollout.looks.order_by("at", "id"):
        looks.setdefault(look.trigger, []).append(look)
    rows = []
    for index, trigger in enumerate(rollout.triggers):
        mine = looks.get(index, [])
        last = mine[-1] if mine else None
        values = [look.observation for look in mine if look.observation is not None]
        evaluable = trigger_evaluable(trigger)
        rows.append(
            {
                "index": index,
                "trigger": trigger,
                "condition": trigger_condition(trigger),
                "evaluable": evaluable,
                "state": (last.state if last else "waiting") if evaluable else "not measured",
                "last": last,
                "looks": len(mine),
                "needed": looks_needed(alpha=rollout.alpha, min_samples=int(trigger["min_samples"])),
                "observed": _observed(values),
                "predicted": _prediction(rollout.decision, trigger),
                "series": values[-SERIES_LOOKS:],
            }
        )
    return rows


def _look_json(look: Look | None) -> dict[str, Any] | None:
    if look is None:
        return None
    return {
        "at": look.at.isoformat(),
        "stage": look.stage,
        "candidate": look.candidate,
        "control": look.control,
        "observation": look.observation,
        "n": look.n,
        "mean": look.mean,
        "p_value": look.p_value,
        "state": look.state,
        "message": look.message,
    }


def rollout_payload(rollout: Rollout, *, full: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": rollout.pk,
        "decision_id": rollout.decision_id,
        "state": rollout.state,
        "stage": rollout.stage,
        "stages": rollout.stages,
        "prometheus": rollout.prometheus,
        "candidate_pool": rollout.candidate_pool,
        "control_pool": rollout.control_pool,
        "alpha": rollout.alpha,
        "reason": rollout.reason,
        "started_by": rollout.started_by.username,
        "started_at": rollout.started_at.isoformat(),
        "stage_started_at": rollout.stage_started_at.isoformat(),
        "evaluated_at": rollout.evaluated_at.isoformat() if rollout.evaluated_at else None,
        "ended_at": rollout.ended_at.isoformat() if rollout.ended_at else None,
        "archive_sha256": rollout.archive_sha256 or None,
        "url": f"/decisions/{rollout.decision_id}/rollouts/{rollout.pk}/",
    }
    if not full:
        return out
    out["triggers"] = [
        {
            "trigger": row["trigger"],
            "state": row["state"],
            "looks": row["looks"],
            "looks_needed": row["needed"],
            "last": _look_json(row["last"]),
            "observed": row["observed"],
            "predicted": row["predicted"],
        }
        for row in trigger_rows(rollout)
    ]
    out["events"] = [
        {"action": e.action, "actor": e.actor.username if e.actor else None, "at": e.at.isoformat(), "details": e.details}
        for e in RolloutEvent.objects.filter(rollout=rollout).select_related("actor").exclude(action="looked")
    ]
    return out


def rollout_bundle(rollout: Rollout) -> dict[str, Any]:
    """What the hash chain keeps of a rollout that ended: the rollout, every trigger's state and
    numbers, and its whole event trail (looks included)."""
    payload = rollout_payload(rollout, full=True)
    payload["events"] = [
        {"action": e.action, "actor_id": e.actor_id, "at": e.at.isoformat(), "details": e.details}
        for e in RolloutEvent.objects.filter(rollout=rollout)
    ]
    payload["triggers"] = [t | {"last": t["last"]} for t in payload["triggers"]]
    return {"kind": "rollout", "rollout": payload, "decision": {"id": rollout.decision_id}}


def stages_parse(text: str) -> list[dict[str, Any]]:
    """``share:minutes,share:minutes`` (percent, minutes) as stages; ValueError naming the part.
    The numbers' bounds are ``services.stages_check``'s."""
    stages = []
    for n, part in enumerate((p.strip() for p in text.split(",")), start=1):
        share, sep, minutes = part.partition(":")
        try:
            if not sep:
                raise ValueError
            stages.append({"share": float(share), "minutes": float(minutes)})
        except ValueError:
            raise ValueError(f"stages, stage {n}: write share:minutes (e.g. 10:30), got {part[:40]!r}") from None
    return [{k: int(v) if v.is_integer() else v for k, v in s.items()} for s in stages]


def export_documents(
    *, decision: Decision, tool: str, prometheus_address: str, namespace: str, stages: list[dict[str, Any]]
) -> dict[str, Any]:
    """The decision's triggers as ``argo`` (an AnalysisTemplate) or ``flagger`` (MetricTemplates
    and a Canary's ``analysis`` block over ``stages``): documents, their YAML, and the triggers
    left out with why. ValueError when an argument is one the tool would refuse."""
    triggers = decision.rollback_triggers or []
    if tool == "argo":
        docs = [
            exports.argo_analysis_template(
                triggers=triggers, name=f"specreview-decision-{decision.pk}", prometheus_address=prometheus_address
            )
        ]
    elif tool == "flagger":
        docs = exports.flagger_metric_templates(
            triggers=triggers, namespace=namespace, prometheus_address=prometheus_address
        )
        docs.append({"analysis": exports.flagger_canary_analysis(triggers=triggers, stages=stages, namespace=namespace)})
    else:
        raise ValueError(f"tool: argo or flagger, not {tool[:20]!r}")
    skipped = [
        {"index": s.index, "metric": s.metric, "reason": s.reason} for s in exports.skipped_triggers(triggers=triggers)
    ]
    return {"tool": tool, "yaml": exports.exports_yaml(docs), "documents": docs, "skipped": skipped}
