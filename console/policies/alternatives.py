"""Would a simpler rule have done better? The fitted policy against the alternatives its holdout
already scores: speculation everywhere with each candidate arm (all-on) and speculation nowhere
(all-off, the baseline everywhere). Pure functions; no Django. Benefits in seconds saved per
request against the baseline, as in :mod:`console.policies.fitting`.

For each alternative, on the holdout requests where both are defined, the paired difference
**alternative - policy** of the policy's statistic (``mean`` or ``p50`` of the per-request
benefits), with the comparison's request-clustered bootstrap
(:func:`console.analysis.comparison.bootstrap.bootstrap_distributions`, requests drawn with
replacement, each request's benefit the mean over its repeats and loads) and its interval
(:func:`console.analysis.comparison.intervals.paired_delta`: Student t on the bootstrap standard
error for a mean, percentile for a median; "not measured" below the comparison's reporting
rule). An alternative **beats** the fitted policy when that interval lies above zero.

Greedy fitting refuses every slice whose train interval crosses zero; with few requests per
slice it can keep speculation off everywhere while turning it on everywhere would have paid
(issue 23). The holdout says so here, and the policy page offers the alternative; a policy
adopted that way was chosen by looking at the holdout, so its holdout score is no longer an
independent check (the page says so).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from console.analysis.comparison.bootstrap import DEFAULT_N_BOOT, bootstrap_distributions, point_stat
from console.analysis.comparison.intervals import paired_delta
from console.policies.fitting import FitParams
from console.policies.router import policy_route

ALL_OFF = "all_off"
ALL_ON = "all_on:"  # + the arm's label


def alternative_key(arm: str | None) -> str:
    """``all_on:<arm>`` for speculation everywhere with ``arm``, ``all_off`` for None."""
    return ALL_OFF if arm is None else f"{ALL_ON}{arm}"


def alternative_arm(key: str) -> str | None:
    """The arm an alternative turns on everywhere (None for all-off). Raises ValueError for a key
    that names neither."""
    if key == ALL_OFF:
        return None
    if key.startswith(ALL_ON) and len(key) > len(ALL_ON):
        return key[len(ALL_ON) :]
    raise ValueError(f"not an alternative rule: {key[:80]!r} (use all_off or all_on:<arm>)")


def alternative_rules(
    key: str, *, arm_configs: Mapping[str, Any], scope: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The rule list of an alternative: for all-on one rule turning ``arm`` on for all traffic
    (within ``scope``, the model condition a fit puts on every rule), then the default, off."""
    arm = alternative_arm(key)
    rules: list[dict[str, Any]] = []
    if arm is not None:
        if arm not in arm_configs:
            raise ValueError(f"no speculative config for arm {arm!r}")
        rules.append({"when": dict(scope), "arm": arm, "speculative_config": arm_configs[arm]})
    rules.append({"when": {}, "arm": None, "speculative_config": None})
    return rules


def _routed(rules: Sequence[Mapping[str, Any]], wide: pd.DataFrame, feats: pd.DataFrame) -> np.ndarray:
    """Each request's realized benefit under ``rules``: its routed arm's, 0 where off."""
    route = policy_route(rules, feats)
    routed = np.zeros(len(feats))
    for arm in wide.columns:
        rows = (route["arm"] == arm).to_numpy()
        routed[rows] = wide[arm].to_numpy(dtype=float)[rows]
    return routed


def holdout_alternatives(
    rules: Sequence[Mapping[str, Any]],
    units: pd.DataFrame,
    features: pd.DataFrame,
    *,
    params: FitParams,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One entry per alternative (all-on per arm, then all-off) on the holdout requests:
    ``key``, ``arm``, ``n`` (requests paired), ``policy`` and ``alternative`` (the statistic of
    each, seconds), ``delta`` (alternative - policy) with ``lo``/``hi``, ``measured``, ``reason``
    and ``beats`` (the interval lies above zero)."""
    feats = features.loc[features["split"] == "holdout"]
    arms = sorted(units["arm"].unique().tolist(), key=str)
    wide = units.pivot_table(
        index="request_id", columns="arm", values="benefit", aggfunc="first", dropna=False
    )
    wide = wide.reindex(index=feats.index, columns=arms)
    policy = _routed(rules, wide, feats)
    out = []
    for key in [*(alternative_key(a) for a in arms), ALL_OFF]:
        arm = alternative_arm(key)
        alt = np.zeros(len(feats)) if arm is None else wide[arm].to_numpy(dtype=float)
        out.append(_paired(key, arm, policy, alt, feats.index.to_numpy(), params, n_boot=n_boot, seed=seed))
    return out


def _paired(
    key: str,
    arm: str | None,
    policy: np.ndarray,
    alt: np.ndarray,
    requests: np.ndarray,
    params: FitParams,
    *,
    n_boot: int,
    seed: int,
) -> dict[str, Any]:
    both = np.isfinite(policy) & np.isfinite(alt)
    n = int(both.sum())
    pol, alt = policy[both], alt[both]
    stats: dict[Hashable, Sequence[str]] = {"policy": [params.stat], "alt": [params.stat]}
    boot = bootstrap_distributions(
        {"policy": pol, "alt": alt}, stats=stats, clusters=requests[both], n_boot=n_boot, seed=seed
    )
    d = paired_delta(
        stat=params.stat,
        base_point=point_stat(pol, params.stat),
        cand_point=point_stat(alt, params.stat),
        base_boot=boot[("policy", params.stat)],
        cand_boot=boot[("alt", params.stat)],
        n_requests=n,
        ci=params.ci,
    )
    lo, hi = float(d["delta_lo"]), float(d["delta_hi"])  # type: ignore[arg-type]
    return {
        "key": key,
        "arm": arm,
        "n": n,
        "policy": d["base"],
        "alternative": d["cand"],
        "delta": d["delta"],
        "lo": lo,
        "hi": hi,
        "measured": bool(d["measured"]),
        "reason": d["reason"],
        "beats": bool(d["measured"] and np.isfinite(lo) and lo > 0),
    }


def holdout_warning(alternatives: Sequence[Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """The alternative that beats the fitted policy on the holdout by the most (None when none
    does, or the policy was stored before its alternatives were scored)."""
    beating = [a for a in alternatives or () if a.get("beats")]
    return dict(max(beating, key=lambda a: (a["delta"], a["lo"]))) if beating else None
