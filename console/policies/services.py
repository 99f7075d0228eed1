"""Writes for slice policies: fit on the train split, score on the holdout split, store.

Raises ``FeatureError`` (a feature known only after execution, or not allowlisted),
``PolicyInputError`` (the experiment cannot give the inputs), ``PermissionDenied`` (role).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
from django.core.exceptions import PermissionDenied
from django.db import transaction

from console.accounts import roles, teams
from console.experiments.models import Experiment
from console.jsonutil import json_safe
from console.policies import alternatives as policy_alternatives
from console.policies import features as policy_features
from console.policies import fitting as policy_fitting
from console.policies import pairs as policy_pairs
from console.policies import router as policy_router
from console.policies.models import SlicePolicy
from console.policies.selectors import PolicyInputError, PolicyInputs, policy_inputs


@transaction.atomic
def policy_fit(
    *,
    experiment: Experiment,
    arms: Sequence[str] | None = None,
    load: str | None = None,
    metric: str = "tpot_s",
    features: Sequence[str] = policy_features.DEFAULT_FEATURES,
    min_support: int = 10,
    ci: float = 0.95,
    max_success_loss: float = 0.0,
    created_by: Any,
) -> SlicePolicy:
    """Fit a slice policy for ``experiment`` and store it.

    ``arms``: candidate arm labels to choose among per slice (None = every candidate; a sweep's
    arms give each slice its best draft length). ``load``: one load level label, or None to pool
    all loads. ``metric``: a key of ``policy_pairs.METRICS`` (benefits are seconds saved per request vs the
    baseline). ``min_support``: requests per slice (train). Fitted on the trace's train split
    only; scored on its holdout split.
    """
    if created_by is None or not teams.can(created_by, roles.RUN_EXPERIMENT, team_id=experiment.trace.team_id):
        raise PermissionDenied(f"needs permission {roles.RUN_EXPERIMENT} in the experiment's team")
    names = policy_features.features_validate(features)
    _options_check(metric=metric, min_support=min_support, ci=ci)
    inputs = policy_inputs(experiment=experiment, arms=list(arms) if arms is not None else None, load=load)
    _splits_check(inputs)
    params = policy_fitting.FitParams(
        min_support=min_support,
        stat=policy_pairs.METRICS[metric][1],
        ci=ci,
        max_success_loss=max_success_loss,
    )
    pairs = policy_pairs.pairs_build(inputs.derived, baseline_arm=inputs.baseline_arm, metric=metric)
    units = policy_pairs.units_build(pairs)
    fitted = policy_fitting.policy_fit(
        units, inputs.features, feature_names=names, arm_configs=inputs.arm_configs, params=params
    )
    return _policy_store(
        experiment=experiment,
        inputs=inputs,
        pairs=pairs,
        units=units,
        rules=fitted["rules"],
        details={"candidates": fitted["candidates"]},
        load=load,
        metric=metric,
        features=names,
        params=params,
        created_by=created_by,
    )


def _policy_store(
    *,
    experiment: Experiment,
    inputs: PolicyInputs,
    pairs: pd.DataFrame,
    units: pd.DataFrame,
    rules: list[dict[str, Any]],
    details: dict[str, Any],
    load: str | None,
    metric: str,
    features: Sequence[str],
    params: policy_fitting.FitParams,
    created_by: Any,
) -> SlicePolicy:
    """Score ``rules`` on train and on holdout (each load level alone too when loads are
    pooled), score the holdout's alternatives (:mod:`console.policies.alternatives`), store."""
    train = policy_fitting.policy_score(rules, units, inputs.features, split="train", params=params)
    holdout = policy_fitting.policy_score(rules, units, inputs.features, split="holdout", params=params)
    if load is None and pairs["load"].nunique() > 1:
        # Pooled loads can hide a level where the policy stops paying: score each level too.
        _score_by_load(
            ((train, "train"), (holdout, "holdout")),
            experiment=experiment,
            rules=rules,
            pairs=pairs,
            features=inputs.features,
            params=params,
        )
    holdout["alternatives"] = policy_alternatives.holdout_alternatives(
        rules, units, inputs.features, params=params
    )
    document = json_safe(policy_router.rules_document(rules))
    return SlicePolicy.objects.create(
        experiment=experiment,
        baseline_arm=inputs.baseline_arm,
        arms=sorted(inputs.arm_configs),
        load=load or "",
        metric=metric,
        features=list(features),
        params={
            "min_support": params.min_support,
            "ci": params.ci,
            "stat": params.stat,
            "max_success_loss": params.max_success_loss,
            "max_features": params.max_features,
        },
        rules=document,
        rules_sha256=policy_router.document_sha256(document),
        fit_details=json_safe({"rules_train": [r.get("train") for r in rules], **details}),
        train_scores=json_safe(train),
        holdout_scores=json_safe(holdout),
        overfitting=json_safe(policy_fitting.overfitting_flags(train, holdout)),
        source_runs=inputs.run_ids,
        created_by=created_by,
    )


@transaction.atomic
def policy_adopt(*, policy: SlicePolicy, alternative: str, created_by: Any) -> SlicePolicy:
    """Store ``alternative`` (a key of ``policy``'s scored holdout alternatives: ``all_on:<arm>``
    or ``all_off``) as a new policy on the same experiment, candidates, load, metric, features
    and parameters, scored like a fitted one. It was chosen by looking at ``policy``'s holdout, so
    its ``fit_details["adopted"]`` says so and the page warns that its holdout score is no
    independent check. Raises ``PolicyInputError`` for an alternative ``policy`` did not score."""
    team_id = policy.experiment.trace.team_id
    if created_by is None or not teams.can(created_by, roles.RUN_EXPERIMENT, team_id=team_id):
        raise PermissionDenied(f"needs permission {roles.RUN_EXPERIMENT} in the policy's team")
    if policy.metric not in policy_pairs.METRICS:
        raise PolicyInputError(f"the policy's metric {policy.metric!r} is no longer one the console fits")
    scored = {a.get("key"): a for a in (policy.holdout_scores or {}).get("alternatives") or []}
    if alternative not in scored:
        known = ", ".join(map(str, scored)) or "none (refit the policy to score them)"
        raise PolicyInputError(
            f"alternative: {alternative[:80]!r} is not one this policy scored; it scored {known}"
        )
    inputs = policy_inputs(experiment=policy.experiment, arms=list(policy.arms), load=policy.load or None)
    stored = policy.params or {}
    params = policy_fitting.FitParams(
        min_support=int(stored.get("min_support", 10)),
        stat=str(stored.get("stat", policy_pairs.METRICS[policy.metric][1])),
        ci=float(stored.get("ci", 0.95)),
        max_success_loss=float(stored.get("max_success_loss", 0.0)),
        max_features=int(stored.get("max_features", 2)),
    )
    pairs = policy_pairs.pairs_build(inputs.derived, baseline_arm=inputs.baseline_arm, metric=policy.metric)
    scope = (
        {"model": inputs.features["model"].iloc[0]}
        if "model" in policy.features and len(inputs.features)
        else {}
    )
    try:
        rules = policy_alternatives.alternative_rules(
            alternative, arm_configs=inputs.arm_configs, scope=scope
        )
    except ValueError as exc:
        raise PolicyInputError(f"alternative: {exc}") from None
    adopted = {"from_policy": policy.pk, "alternative": alternative, "holdout": scored[alternative]}
    return _policy_store(
        experiment=policy.experiment,
        inputs=inputs,
        pairs=pairs,
        units=policy_pairs.units_build(pairs),
        rules=rules,
        details={"candidates": [], "adopted": adopted},
        load=policy.load or None,
        metric=policy.metric,
        features=policy.features,
        params=params,
        created_by=created_by,
    )


def _options_check(*, metric: str, min_support: int, ci: float) -> None:
    if metric not in policy_pairs.METRICS:
        raise PolicyInputError(f"unknown metric {metric!r}; choose one of {', '.join(policy_pairs.METRICS)}")
    if min_support < 2:
        raise PolicyInputError("minimum support must be at least 2 requests (an interval needs two)")
    if not 0 < ci < 1:
        raise PolicyInputError("the interval level must be between 0 and 1")


def _splits_check(inputs: PolicyInputs) -> None:
    """Both splits must have results: the policy is fitted on train and validated on holdout."""
    splits = set(inputs.features["split"].dropna())
    if "train" not in splits:
        raise PolicyInputError("no results on train requests: the policy has nothing to be fitted on")
    if "holdout" not in splits:
        raise PolicyInputError(
            "no results on holdout requests (did the experiment run only the train split?): "
            "a policy must be validated on requests it was not fitted on"
        )


def _score_by_load(
    scored_splits: Iterable[tuple[dict[str, Any], str]],
    *,
    experiment: Experiment,
    rules: Sequence[Mapping[str, Any]],
    pairs: pd.DataFrame,
    features: pd.DataFrame,
    params: policy_fitting.FitParams,
) -> None:
    """Add ``by_load`` to each split's scores: the headline scores of each load level alone, in
    the experiment's load order."""
    for scores, split in scored_splits:
        scores["by_load"] = {
            str(level): _headline(
                policy_fitting.policy_score(
                    rules,
                    policy_pairs.units_build(pairs.loc[pairs["load"] == level]),
                    features,
                    split=split,
                    params=params,
                )
            )
            for level in _load_order(experiment, pairs["load"].unique())
        }


def _headline(scores: dict[str, Any]) -> dict[str, Any]:
    keys = ("n_requests", "share_on", "policy", "all_on", "policy_vs_all_on", "lost_successes", "regressions")
    return {k: scores[k] for k in keys}


def _load_order(experiment: Experiment, present: Any) -> list[str]:
    order = [lv.get("label") for lv in experiment.load_levels or []]
    present = [str(x) for x in present]
    return [x for x in order if x in present] + sorted(x for x in present if x not in order)
