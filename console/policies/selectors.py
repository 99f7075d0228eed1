"""Reads for slice policies: the fitter's inputs from stored results, and what the pages show."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from django.db.models import QuerySet

from console.accounts import teams
from console.analysis.metrics import requests_derive
from console.analysis.quality import quality_flags
from console.analysis.selectors import experiment_finished_runs, experiment_sweeps
from console.experiments.models import Experiment
from console.policies import deploy
from console.policies import features as policy_features
from console.policies import pairs as policy_pairs
from console.policies import words as policy_words
from console.policies.alternatives import holdout_warning
from console.policies.fitting import INTERVAL_CROSSES_ZERO
from console.policies.models import SlicePolicy
from console.policies.requests_needed import slice_requests_needed
from console.results.selectors import results_frames
from console.traces.models import TraceRequest


class PolicyInputError(ValueError):
    """The experiment cannot give a policy its inputs (message says why)."""


@dataclass
class PolicyInputs:
    """What :func:`console.policies.fitting.policy_fit` needs, read from one experiment."""

    baseline_arm: str
    arm_configs: dict[str, Any]
    derived: pd.DataFrame
    features: pd.DataFrame
    run_ids: list[int] = field(default_factory=list)


def experiment_fit_choices(*, experiment: Experiment) -> dict[str, Any]:
    """Arms, load levels, sweeps and metrics the fit form offers for ``experiment``."""
    arms = list(experiment.arms.select_related("config").order_by("position"))
    finished = {r.arm_id for r in experiment_finished_runs(experiment=experiment)}
    return {
        "baseline": next((a.label for a in arms if a.is_baseline), None),
        "candidates": [a.label for a in arms if not a.is_baseline and a.pk in finished],
        "loads": [lv.get("label") for lv in experiment.load_levels or []],
        "sweeps": experiment_sweeps(arms=arms),
        "metrics": {k: v[2] for k, v in policy_pairs.METRICS.items()},
        "features": dict(policy_features.ALLOWED_FEATURES),
    }


def policy_inputs(*, experiment: Experiment, arms: list[str] | None, load: str | None) -> PolicyInputs:
    """The experiment's finished results for the baseline and ``arms`` (None = every candidate)
    at ``load`` (None = all loads), with the trace's train/holdout split joined by request id,
    per-request metrics (seconds, under the experiment's deadlines) and quality flags."""
    all_arms = list(experiment.arms.select_related("config"))
    baselines = [a for a in all_arms if a.is_baseline]
    if len(baselines) != 1:
        raise PolicyInputError(
            f"the experiment has {len(baselines)} baseline arms; a policy needs exactly one"
        )
    baseline = baselines[0]
    candidates = [a for a in all_arms if not a.is_baseline]
    if arms is not None:
        known = {a.label for a in candidates}
        unknown = [a for a in arms if a not in known]
        if unknown:
            raise PolicyInputError(f"not a candidate arm of this experiment: {', '.join(unknown)}")
        candidates = [a for a in candidates if a.label in arms]
    if not candidates:
        raise PolicyInputError("choose at least one candidate arm")
    loads = [lv.get("label") for lv in experiment.load_levels or []]
    if load is not None and load not in loads:
        raise PolicyInputError(
            f"unknown load level {load!r}; the experiment has {', '.join(map(str, loads))}"
        )
    wanted = {baseline.pk, *(a.pk for a in candidates)}
    runs = [
        r
        for r in experiment_finished_runs(experiment=experiment)
        if r.arm_id in wanted and (load is None or r.load_label == load)
    ]
    if not any(r.arm_id == baseline.pk for r in runs):
        raise PolicyInputError("no finished baseline run at this load: nothing to pair the candidates with")
    finished_candidates = {r.arm_id for r in runs} - {baseline.pk}
    candidates = [a for a in candidates if a.pk in finished_candidates]
    if not candidates:
        raise PolicyInputError("no finished candidate run at this load")
    requests, _ = results_frames(runs=runs)
    splits = dict(
        TraceRequest.objects.filter(trace_id=experiment.trace_id).values_list("request_id", "split")
    )
    requests["split"] = requests["request_id"].map(splits)
    derived = requests_derive(requests, deadlines=experiment.deadlines)
    flags = quality_flags(derived)
    # results_frames may already carry the flags the worker stored: the checked ones replace them.
    derived = pd.concat([derived.drop(columns=[c for c in flags.columns if c in derived]), flags], axis=1)
    model = baseline.config.target_model or experiment.target_model
    return PolicyInputs(
        baseline_arm=baseline.label,
        arm_configs={a.label: a.config.speculative_config for a in candidates},
        derived=derived,
        features=policy_features.request_features(requests, model=model),
        run_ids=sorted(r.pk for r in runs),
    )


def policy_list(*, user: Any, experiment: Experiment | None = None) -> QuerySet[SlicePolicy]:
    """The policies of the user's teams (of ``experiment`` when given)."""
    qs = teams.visible(SlicePolicy.objects.select_related("experiment", "created_by"), user)
    return qs.filter(experiment=experiment) if experiment is not None else qs


def policy_export(*, policy: SlicePolicy) -> dict[str, Any]:
    """The policy as a decision freezes it: the router document, its sha256, what it was fitted
    on, and the train and holdout headline numbers (benefits in seconds vs the baseline)."""

    def headline(scores: dict) -> dict:
        return {
            k: scores.get(k) for k in ("n_requests", "share_on", "policy", "lost_successes", "regressions")
        }

    return {
        "id": policy.pk,
        "url": f"/policies/{policy.pk}/",
        "experiment_id": policy.experiment_id,
        "baseline_arm": policy.baseline_arm,
        "arms": policy.arms,
        "load": policy.load or None,
        "metric": policy.metric,
        "features": policy.features,
        "params": policy.params,
        "document": policy.rules,
        "rules_sha256": policy.rules_sha256,
        "train": headline(policy.train_scores or {}),
        "holdout": headline(policy.holdout_scores or {}),
        "overfitting": policy.overfitting,
        "created_by": policy.created_by.username if policy.created_by else None,
        "created_at": policy.created_at.isoformat() if policy.created_at else None,
    }


def policy_page(*, policy: SlicePolicy) -> dict[str, Any]:
    """Rows for the detail page: one per rule with its train and holdout numbers (seconds) and
    whether it is flagged as overfit; and the slices the fit's first round considered (enabled
    first, then by benefit), with why each could not be enabled."""
    doc_rules = (policy.rules or {}).get("rules", [])
    train = (policy.train_scores or {}).get("rules", [])
    holdout = (policy.holdout_scores or {}).get("rules", [])
    flagged = set((policy.overfitting or {}).get("rules", []))
    rows = []
    for i, rule in enumerate(doc_rules):
        rows.append(
            {
                "index": i + 1,
                "when": policy_words.when_text(rule.get("when") or {}),
                "arm": rule.get("arm"),
                "speculative_config": rule.get("speculative_config"),
                "speculative_config_json": json.dumps(rule.get("speculative_config"), sort_keys=True),
                "train": train[i] if i < len(train) else {},
                "holdout": holdout[i] if i < len(holdout) else {},
                "splits": [train[i] if i < len(train) else {}, holdout[i] if i < len(holdout) else {}],
                "overfit": i in flagged,
            }
        )
    considered = []
    for row in (policy.fit_details or {}).get("candidates", []):
        # Left off only for lack of data: how many more requests would decide it.
        undecided = row.get("why_not") == INTERVAL_CROSSES_ZERO
        needed = slice_requests_needed(row) if undecided else None
        considered.append(
            {
                **row,
                "when_text": policy_words.when_text(row.get("when") or {}),
                "more_needed": needed.more if needed else None,
                "needed_text": policy_words.requests_needed_text(row) if undecided else "",
            }
        )
    considered.sort(key=lambda r: (r.get("why_not") is not None, -(r.get("benefit") or 0.0)))
    undecided_rows = sorted(
        (r for r in considered if r["more_needed"] is not None), key=lambda r: r["more_needed"]
    )
    return {
        "rules": rows,
        "considered": considered[:300],
        "n_considered": len(considered),
        "undecided": {"n": len(undecided_rows), "nearest": undecided_rows[0] if undecided_rows else None},
    }


def policy_holdout(*, policy: SlicePolicy) -> dict[str, Any]:
    """The holdout's simpler rules against ``policy`` (``console.policies.alternatives``), for its
    page: ``scored`` (False for a policy stored before they were), ``alternatives`` (each in words,
    with its paired difference alternative - policy as a benefit summary, seconds), ``warning``
    (the one that beats the policy by the most, None when none does) and ``adopted`` (where a
    policy adopted from another's warning came from, else None)."""
    stored = (policy.holdout_scores or {}).get("alternatives")
    rows = [
        {
            **a,
            "label": policy_words.alternative_text(a.get("key")),
            "difference": {"benefit": a.get("delta"), "lo": a.get("lo"), "hi": a.get("hi"), "n": a.get("n")},
        }
        for a in stored or []
    ]
    best = holdout_warning(stored)
    adopted = (policy.fit_details or {}).get("adopted")
    if adopted:
        adopted = {**adopted, "label": policy_words.alternative_text(adopted.get("alternative"))}
    return {
        "scored": stored is not None,
        "alternatives": rows,
        "warning": next((r for r in rows if best and r.get("key") == best.get("key")), None),
        "adopted": adopted or None,
    }


def policy_holdout_warning(*, policy: SlicePolicy) -> dict[str, Any] | None:
    """The holdout warning as the API and the ``fit_policy`` command give it: which simpler rule
    beats ``policy`` on its holdout (``delta_s``, ``lo_s``, ``hi_s``: alternative - policy,
    seconds per request, with its interval; ``n`` requests) and the offer (the POST that stores
    it as a policy); None when none does."""
    best = holdout_warning((policy.holdout_scores or {}).get("alternatives"))
    if best is None:
        return None
    return {
        "alternative": best["key"],
        "label": policy_words.alternative_text(best["key"]),
        "statistic": (policy.params or {}).get("stat"),
        "delta_s": best.get("delta"),
        "lo_s": best.get("lo"),
        "hi_s": best.get("hi"),
        "n": best.get("n"),
        "offer": {
            "method": "POST",
            "api": f"/api/policies/{policy.pk}/adopt",
            "page": f"/policies/{policy.pk}/adopt/",
            "fields": {"alternative": best["key"]},
        },
    }


def policy_model(*, policy: SlicePolicy) -> str:
    """The target model the policy was measured on (its ``model`` conditions name it)."""
    for rule in (policy.rules or {}).get("rules", []):
        if isinstance((rule.get("when") or {}).get("model"), str):
            return rule["when"]["model"]
    baseline = policy.experiment.arms.select_related("config").filter(label=policy.baseline_arm).first()
    return (baseline.config.target_model if baseline else "") or policy.experiment.target_model


def policy_deployment(*, policy: SlicePolicy) -> deploy.Deployment:
    """The serving pools and router table for ``policy``, from the experiment's stored arm configs
    (what each arm actually ran: engine, target model, engine args, speculative config).

    Raises ``deploy.DeployError`` when the rules name an arm the experiment no longer has, or a
    stored value cannot be put on a vLLM command line.
    """
    arms = {a.label: a for a in policy.experiment.arms.select_related("config")}

    def serving(label: str) -> deploy.ArmServing:
        config = arms[label].config
        return deploy.ArmServing(
            label=label,
            engine=config.engine,
            target_model=config.target_model or policy.experiment.target_model,
            engine_args=dict(config.engine_args or {}),
            speculative_config=config.speculative_config,
        )

    if policy.baseline_arm not in arms:
        raise deploy.DeployError(f"the baseline arm {policy.baseline_arm!r} is no longer in the experiment")
    return deploy.deployment_build(
        policy_id=policy.pk,
        rules_sha256=policy.rules_sha256,
        document=policy.rules or {},
        model=policy_model(policy=policy),
        baseline=serving(policy.baseline_arm),
        candidates={label: serving(label) for label, arm in arms.items() if not arm.is_baseline},
    )
