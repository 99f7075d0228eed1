"""Slice policies: where to turn speculation on, from features known before execution.

Pure functions over pandas/numpy; no Django. Times are seconds, lengths are tokens.

Pipeline
--------
1. :func:`console.policies.features.request_features`: the allowlisted pre-execution features
   of each request (:mod:`console.policies.features`).
2. and 3. :func:`console.policies.pairs.pairs_build` and ``units_build``: paired benefits, one
   unit per (candidate arm, request) (:mod:`console.policies.pairs`).
4. :func:`policy_fit` (train split only): a first-match rule list built greedily. Candidate
   slices are the whole traffic and every combination of one or two allowlisted features
   (values seen in train). A (slice, arm) is **eligible** on the train requests no earlier rule
   caught when it has at least ``min_support`` requests with a defined benefit, no quality
   regression, loses no more successes than ``max_success_loss`` x its requests, and the lower
   end of its benefit interval is above zero. The eligible (slice, arm) with the largest total
   benefit (statistic x requests) becomes the next rule; its requests leave the pool; repeat
   until nothing is eligible. Inside a chosen slice, a sub-slice (within ``max_features``) where
   its arm is significantly worse (interval below zero, ``min_support`` requests) becomes an
   explicit off rule placed before it (a carve-out), as long as the rest of the slice stays
   eligible. The last rule is the default: off. Arms of a draft-length sweep compete per slice,
   so each slice gets its best k.
5. :func:`policy_score`: route every request of one split through the rules (first match wins)
   and report the realized benefit of the policy, of each candidate everywhere (all-on) and of
   the baseline everywhere (all-off, 0 by definition), with intervals, per rule too, the share of
   traffic turned on, lost successes and regressions under the policy, and overfitting flags;
   :mod:`console.policies.alternatives` pits the policy against those simpler rules on the
   holdout, paired per request, and says when one of them beats it.
6. The rules become a router document (:mod:`console.policies.router`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from console.policies.features import features_validate
from console.policies.pairs import benefit_interval
from console.policies.router import policy_route, rule_matches


def _to_json_value(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass(frozen=True)
class FitParams:
    """Knobs of :func:`policy_fit`: ``min_support`` (requests with a defined benefit),
    ``stat`` ("mean"/"p50"), ``ci`` (interval level), ``max_success_loss`` (fraction of a slice's
    requests whose success the candidate may lose, net), ``max_features`` (features per slice)."""

    min_support: int = 10
    stat: str = "mean"
    ci: float = 0.95
    max_success_loss: float = 0.0
    max_features: int = 2


def _slice_stats(pool: pd.DataFrame, combo: tuple[str, ...], params: FitParams) -> list[dict[str, Any]]:
    """Stats of every (arm, values of ``combo``) group of ``pool`` (units joined with features)."""
    rows = []
    keys = ["arm", *combo]
    for key, group in pool.groupby(keys, sort=True, dropna=True):
        key = key if isinstance(key, tuple) else (key,)
        benefits = group["benefit"].to_numpy(dtype=float)
        n = int(np.isfinite(benefits).sum())
        point, lo, hi = (
            benefit_interval(benefits, stat=params.stat, ci=params.ci)
            if n >= params.min_support
            else (float(np.nanmean(benefits)) if n else float("nan"), float("nan"), float("nan"))
        )
        rows.append(
            {
                "arm": key[0],
                "when": {c: _to_json_value(v) for c, v in zip(combo, key[1:], strict=True)},
                "n_requests": int(len(group)),
                "n": n,
                "benefit": point,
                "lo": lo,
                "hi": hi,
                "lost_successes": float(-group["success_delta"].sum()),
                "regressions": int(group["regression"].sum()),
            }
        )
    return rows


# Why a slice with the support, no regression and no lost success was not enabled: only its
# interval, that is too few requests for the effect seen (``requests_needed`` says how many more).
INTERVAL_CROSSES_ZERO = "benefit interval does not exclude zero"


def _eligible(row: Mapping[str, Any], params: FitParams) -> str | None:
    """None when the slice may be enabled, else why not."""
    if row["n"] < params.min_support:
        return f"support {row['n']} < {params.min_support}"
    if row["regressions"] > 0:
        return f"{row['regressions']} quality regression(s)"
    if row["lost_successes"] > params.max_success_loss * row["n_requests"] + 1e-9:
        return f"loses {row['lost_successes']:g} successful request(s)"
    if not (np.isfinite(row["lo"]) and row["lo"] > 0):
        return INTERVAL_CROSSES_ZERO
    return None


TRAIN_KEYS: tuple[str, ...] = ("n", "benefit", "lo", "hi", "lost_successes", "regressions")


def _carve_outs(
    pool: pd.DataFrame, best: dict[str, Any], slicing: Sequence[str], params: FitParams
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Sub-slices of the chosen slice where its arm is significantly worse than the baseline
    (interval entirely below zero, with ``min_support``): each becomes an explicit off rule placed
    before the slice's rule. Returns them and the slice's statistics without them; no carve-out
    when the slice would then lose its support or its interval above zero."""
    inside = pool.loc[rule_matches(best["when"], pool) & (pool["arm"] == best["arm"]).to_numpy()]
    free = [f for f in slicing if f not in best["when"]]
    room = params.max_features - len(best["when"])
    carved: list[dict[str, Any]] = []
    for size in range(1, room + 1):
        for extra in itertools.combinations(free, size):
            for row in _slice_stats(inside, extra, params):
                if row["n"] >= params.min_support and np.isfinite(row["hi"]) and row["hi"] < 0:
                    row["when"] = {**best["when"], **row["when"]}
                    carved.append(row)
                    inside = inside.loc[~rule_matches(row["when"], inside)]
    if not carved:
        return [], best
    rest = _slice_stats(inside, (), params)
    if not rest:
        return [], best
    remaining = {**rest[0], "when": best["when"]}
    if _eligible(remaining, params) is not None:
        return [], best
    return carved, remaining


def policy_fit(
    units: pd.DataFrame,
    features: pd.DataFrame,
    *,
    feature_names: Sequence[str],
    arm_configs: Mapping[str, Any],
    params: FitParams | None = None,
) -> dict[str, Any]:
    """Fit a first-match rule list on the **train** requests (see module docstring).

    ``units`` is :func:`units_build`'s frame; ``features`` is :func:`request_features`'s (its
    ``split`` decides which requests are train; holdout rows are never read). ``arm_configs``
    maps each candidate arm label to its speculative config (what a rule turns on).
    Returns ``{"rules": [...], "candidates": [...]}``: the rule list (the last one the default,
    off), and the first round's evaluation of every (slice, arm) with why it was or was not
    eligible (benefits in seconds).
    """
    params = params or FitParams()
    names = features_validate(feature_names)
    scope = {"model": features["model"].iloc[0]} if "model" in names and len(features) else {}
    slicing = [f for f in names if f != "model"]
    unknown_arms = sorted(set(units["arm"]) - set(arm_configs))
    if unknown_arms:
        raise ValueError(f"no speculative config for arm(s) {', '.join(map(str, unknown_arms))}")
    train = features.loc[features["split"] == "train", slicing]
    pool = units.merge(train, left_on="request_id", right_index=True, how="inner")
    combos: list[tuple[str, ...]] = [
        c for size in range(0, params.max_features + 1) for c in itertools.combinations(slicing, size)
    ]
    rules: list[dict[str, Any]] = []
    candidates: list[dict[str, Any]] = []
    while len(pool):
        evaluated = []
        for combo in combos:
            for row in _slice_stats(pool, combo, params):
                row["why_not"] = _eligible(row, params)
                evaluated.append(row)
        if not rules:
            candidates = evaluated
        eligible = [r for r in evaluated if r["why_not"] is None]
        if not eligible:
            break
        best = max(
            eligible,
            key=lambda r: (
                r["benefit"] * r["n"],
                -len(r["when"]),
                r["lo"],
                json.dumps(r["when"], sort_keys=True, default=str),
                str(r["arm"]),
            ),
        )
        carved, best = _carve_outs(pool, best, slicing, params)
        for off in carved:
            rules.append(
                {
                    "when": {**scope, **off["when"]},
                    "arm": None,
                    "speculative_config": None,
                    "off_instead_of": best["arm"],
                    "train": {k: off[k] for k in TRAIN_KEYS},
                }
            )
        rules.append(
            {
                "when": {**scope, **best["when"]},
                "arm": best["arm"],
                "speculative_config": arm_configs[best["arm"]],
                "train": {k: best[k] for k in TRAIN_KEYS},
            }
        )
        caught = rule_matches(best["when"], pool)
        pool = pool.loc[~pool["request_id"].isin(pool.loc[caught, "request_id"])]
    rules.append({"when": {}, "arm": None, "speculative_config": None})
    return {"rules": rules, "candidates": candidates}


def _summary(values: np.ndarray, params: FitParams) -> dict[str, float | int]:
    point, lo, hi = benefit_interval(values, stat=params.stat, ci=params.ci)
    return {"n": int(np.isfinite(values).sum()), "benefit": point, "lo": lo, "hi": hi}


def _excludes_zero(s: Mapping[str, Any]) -> bool:
    return bool(np.isfinite(s.get("lo", np.nan)) and s["lo"] > 0)


def _below_zero(s: Mapping[str, Any]) -> bool:
    return bool(np.isfinite(s.get("hi", np.nan)) and s["hi"] < 0)


def policy_score(
    rules: Sequence[Mapping[str, Any]],
    units: pd.DataFrame,
    features: pd.DataFrame,
    *,
    split: str,
    params: FitParams | None = None,
) -> dict[str, Any]:
    """Score ``rules`` on the requests of ``split`` only (benefits in seconds, vs the baseline).

    Returns ``n_requests``, ``share_on`` (fraction of the split's requests a rule turns on),
    ``policy`` (realized benefit: the routed arm's benefit per request, 0 where off),
    ``all_on`` (per candidate arm: its benefit on every request), ``all_off`` (0),
    ``policy_vs_all_on`` (per arm: paired policy - all-on), ``lost_successes`` and
    ``regressions`` under the policy, and ``rules``: per rule, the requests it catches, its
    arm's benefit there with interval. Each summary is ``{"n", "benefit", "lo", "hi"}``.
    """
    params = params or FitParams()
    feats = features.loc[features["split"] == split]
    route = policy_route(rules, feats)
    arms = sorted(units["arm"].unique().tolist(), key=str)
    wide = units.pivot_table(
        index="request_id", columns="arm", values="benefit", aggfunc="first", dropna=False
    )
    wide = wide.reindex(index=feats.index, columns=arms)
    delta = units.pivot_table(index="request_id", columns="arm", values="success_delta", aggfunc="first")
    delta = delta.reindex(index=feats.index, columns=arms)
    regr = units.pivot_table(index="request_id", columns="arm", values="regression", aggfunc="max")
    regr = regr.reindex(index=feats.index, columns=arms).fillna(False).astype(bool)
    n = len(feats)
    on = route["arm"].notna().to_numpy()
    routed = np.zeros(n)
    lost = 0.0
    regressions = 0
    for arm in arms:
        rows = (route["arm"] == arm).to_numpy()
        routed[rows] = wide[arm].to_numpy(dtype=float)[rows]
        lost += float(-np.nansum(delta[arm].to_numpy(dtype=float)[rows]))
        regressions += int(regr[arm].to_numpy(dtype=bool)[rows].sum())
    out: dict[str, Any] = {
        "split": split,
        "n_requests": n,
        "n_on": int(on.sum()),
        "share_on": float(on.mean()) if n else float("nan"),
        "policy": _summary(routed, params),
        "all_off": {"n": n, "benefit": 0.0, "lo": 0.0, "hi": 0.0},
        "all_on": {arm: _summary(wide[arm].to_numpy(dtype=float), params) for arm in arms},
        "policy_vs_all_on": {arm: _summary(routed - wide[arm].to_numpy(dtype=float), params) for arm in arms},
        "lost_successes": lost,
        "regressions": regressions,
    }
    per_rule = []
    for i, r in enumerate(rules):
        rows = (route["rule"] == i).to_numpy()
        entry = {
            "rule": i,
            "when": dict(r.get("when") or {}),
            "arm": r.get("arm"),
            "n_requests": int(rows.sum()),
        }
        if r.get("arm") is not None and r.get("arm") in wide:
            entry.update(_summary(wide[r["arm"]].to_numpy(dtype=float)[rows], params))
        else:
            entry.update({"n": int(rows.sum()), "benefit": 0.0, "lo": 0.0, "hi": 0.0})
            instead = r.get("off_instead_of")
            if instead is not None and instead in wide:
                entry["off_instead_of"] = instead
                entry["foregone"] = _summary(wide[instead].to_numpy(dtype=float)[rows], params)
        per_rule.append(entry)
    out["rules"] = per_rule
    return out


def overfitting_flags(train: Mapping[str, Any], holdout: Mapping[str, Any]) -> dict[str, Any]:
    """Where the train interval excluded zero and the holdout's does not (or holdout has no
    requests there): ``policy`` (bool), ``rules`` (indices of flagged rules: enabling rules whose
    holdout interval is not above zero, off carve-outs whose arm is not clearly worse on
    holdout) and ``reasons`` (one sentence each)."""
    reasons = []
    policy = _excludes_zero(train["policy"]) and not _excludes_zero(holdout["policy"])
    if policy:
        reasons.append(
            "the policy's train benefit interval excludes zero, its holdout interval does not: "
            "the gain may be an artefact of fitting"
        )
    flagged = []
    for tr, ho in zip(train["rules"], holdout["rules"], strict=True):
        if tr.get("foregone") is not None:  # an off carve-out: was its arm really worse there?
            if _below_zero(tr["foregone"]) and not _below_zero(ho.get("foregone") or {}):
                flagged.append(tr["rule"])
                reasons.append(
                    f"off rule {tr['rule'] + 1} ({_when_text(tr['when'])}): {tr.get('off_instead_of')} was "
                    "worse there on train, not clearly worse on holdout"
                )
            continue
        if tr.get("arm") is None or not _excludes_zero(tr):
            continue
        if not _excludes_zero(ho):
            flagged.append(tr["rule"])
            what = "no holdout requests" if ho.get("n", 0) == 0 else "holdout interval includes zero"
            reasons.append(f"rule {tr['rule'] + 1} ({_when_text(tr['when'])}): {what}")
    return {"policy": policy, "rules": flagged, "reasons": reasons}


def _when_text(when: Mapping[str, Any]) -> str:
    return " and ".join(f"{k} = {v}" for k, v in when.items()) or "all traffic"
