"""Slice policies: where to turn speculation on, from features known before execution.

Pure functions over pandas/numpy; no Django. Times are seconds, lengths are tokens.

Pipeline
--------
1. :func:`request_features`: one row per request with the **allowlisted** pre-execution
   features only (``ALLOWED_FEATURES``) and the request's ``split``. It reads the trace's inputs
   (task, traffic class, prompt and max output tokens, response format, tools) and the target
   model, nothing else: output length, acceptance, latency and the output itself are known only
   after execution and cannot become a slice (hindsight). :func:`features_validate` refuses them
   by name with the reason.
2. :func:`pairs_build`: each candidate row is paired with the baseline row of the same load,
   request and repeat. ``benefit`` = baseline metric - candidate metric (seconds; positive = the
   candidate is faster). ``success`` = completed, within the class deadlines and valid output;
   ``regression`` = a quality check (JSON, schema, tool call) passed for the baseline and failed
   for the candidate.
3. :func:`units_build`: one unit per (candidate arm, request): the mean benefit over its repeats
   (and loads, when several are pooled), the mean success change and whether any pair regressed.
   Requests, not repeats, are the sampling unit: repeats of one request are not independent.
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
   traffic turned on, lost successes and regressions under the policy, and overfitting flags.

Intervals
---------
``stat="mean"``: Student t interval of the mean of unit benefits (``mean +- t * sd / sqrt(n)``).
``stat="p50"``: the distribution-free interval of the median from order statistics
``(x_(j), x_(n-j+1))`` with ``j = binom.ppf((1 - ci) / 2, n, 1/2)`` (the sign-test interval:
deterministic; its exact coverage, 1 - 2 binom.cdf(j - 1), is at least ``ci``). NaN when n is
too small for one (j < 1).

The router document
-------------------
``{"schema": SCHEMA, "buckets": {...}, "rules": [{"when": {...}, "arm": ..., "speculative_config":
{...}}, ..., {"when": {}, "arm": null, "speculative_config": null}]}``: ``when`` holds feature
values that must all be equal (an empty ``when`` matches everything); bucket features name the
half-open token ranges listed under ``buckets``. Its sha256 (:func:`document_sha256`) is over the
canonical JSON (sorted keys, no spaces, UTF-8).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from console.analysis.slices import PROMPT_LENGTH_EDGES, bucket_assign, bucket_labels
from console.jsonutil import canonical_json

SCHEMA = "specreview.slice-policy/1"

# Token edges of the max-output-tokens bucket (half-open, last open-ended).
MAX_TOKENS_EDGES: tuple[int, ...] = (0, 64, 256, 1024, 4096)

# Features a router knows before the request runs, with what each is.
ALLOWED_FEATURES: dict[str, str] = {
    "task": "task type from the trace",
    "traffic_class": "interactive or batch",
    "prompt_tokens_bucket": "prompt length bucket (tokens)",
    "max_tokens_bucket": "max output tokens bucket (tokens)",
    "has_schema": "a response_format (JSON / schema) is present",
    "has_tools": "tool definitions are present",
    "model": "the target model (scopes every rule: a policy holds only for the model it was measured on)",
}
DEFAULT_FEATURES: tuple[str, ...] = tuple(ALLOWED_FEATURES)

# Features a user might ask for that are only known once the request has run: refused by name.
POST_EXECUTION_FEATURES: dict[str, str] = {
    **dict.fromkeys(
        ("output_tokens", "num_output_tokens", "output_bucket", "output_length", "output_tokens_bucket"),
        "the answer's length",
    ),
    **dict.fromkeys(
        ("acceptance", "acceptance_rate", "accepted", "drafted", "accepted_per_pass"),
        "draft acceptance is measured while the answer is generated",
    ),
    **dict.fromkeys(
        ("ttft_s", "tpot_s", "e2e_s", "queue_s", "itl_chunk_mean_s", "latency", "n_chunks"),
        "latency is measured while and after the answer is generated",
    ),
    **dict.fromkeys(
        ("output", "output_text", "output_token_ids", "finish_reason", "error", "completed", "failed"),
        "the output and how it ended",
    ),
    **dict.fromkeys(
        ("met_deadline", "success", "benefit", "regression"),
        "the outcome of the run",
    ),
    **dict.fromkeys(
        ("json_valid", "schema_valid", "tool_valid", "output_valid", "exact_match"),
        "validity of the finished answer",
    ),
}

# Selectable metrics: name -> (per-request column in seconds, statistic over units, label).
METRICS: dict[str, tuple[str, str, str]] = {
    "tpot_s": ("tpot_s", "mean", "TPOT, mean of paired per-request savings"),
    "tpot_s_p50": ("tpot_s", "p50", "TPOT, median of paired per-request savings"),
    "e2e_s": ("e2e_s", "mean", "end-to-end latency, mean of paired savings"),
    "e2e_s_p50": ("e2e_s", "p50", "end-to-end latency, median of paired savings"),
    "ttft_s": ("ttft_s", "mean", "TTFT, mean of paired savings"),
}

PAIR_KEYS: tuple[str, ...] = ("load", "request_id", "repeat")
QUALITY_CHECKS: tuple[str, ...] = ("json_valid", "schema_valid", "tool_valid")


class FeatureError(ValueError):
    """A feature that may not define a slice."""


def features_validate(features: Iterable[str]) -> list[str]:
    """The features, in allowlist order, or :class:`FeatureError` naming the first one refused and
    why (known only after execution, or not on the allowlist)."""
    features = list(features)
    for name in features:
        if name in POST_EXECUTION_FEATURES:
            raise FeatureError(
                f"cannot fit on {name!r}: it is known only after execution "
                f"({POST_EXECUTION_FEATURES[name]}); a router must decide before the request runs, "
                "so choosing by it would be hindsight"
            )
        if name not in ALLOWED_FEATURES:
            raise FeatureError(
                f"cannot fit on {name!r}: it is not on the allowlist of pre-execution features "
                f"({', '.join(ALLOWED_FEATURES)})"
            )
    if not features:
        raise FeatureError("choose at least one feature")
    return [f for f in ALLOWED_FEATURES if f in features]


def buckets_spec() -> dict[str, dict[str, Any]]:
    """The bucket definitions a router needs to evaluate bucket features (edges in tokens)."""
    return {
        "prompt_tokens_bucket": {
            "of": "prompt_tokens",
            "edges": list(PROMPT_LENGTH_EDGES),
            "labels": bucket_labels(PROMPT_LENGTH_EDGES),
        },
        "max_tokens_bucket": {
            "of": "max_tokens",
            "edges": list(MAX_TOKENS_EDGES),
            "labels": bucket_labels(MAX_TOKENS_EDGES),
        },
    }


def _present(value: Any) -> bool:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return False
    if isinstance(value, dict | list | tuple | np.ndarray | str):
        return len(value) > 0
    return True


def request_features(requests: pd.DataFrame, *, model: str) -> pd.DataFrame:
    """One row per ``request_id`` (the index) with every allowlisted feature and ``split``.

    Reads only ``request_id``, ``split``, ``task``, ``traffic_class``, ``prompt_tokens`` and
    ``max_tokens`` (tokens), ``response_format`` and ``tools`` from ``requests`` (one or more rows
    per request, e.g. the results of several runs: the first row per request is used, as these
    come from the trace and are the same in every run).
    """
    cols = ["request_id", "split", "task", "traffic_class", "prompt_tokens", "max_tokens"]
    cols += [c for c in ("response_format", "tools") if c in requests]
    first = requests[cols].drop_duplicates("request_id").set_index("request_id")
    out = pd.DataFrame(index=first.index)
    out["split"] = first["split"].astype(object)
    out["task"] = first["task"].astype(object)
    out["traffic_class"] = first["traffic_class"].astype(object)
    out["prompt_tokens_bucket"] = bucket_assign(first["prompt_tokens"].to_numpy(), edges=PROMPT_LENGTH_EDGES)
    out["max_tokens_bucket"] = bucket_assign(first["max_tokens"].to_numpy(), edges=MAX_TOKENS_EDGES)
    out["has_schema"] = [
        _present(v) for v in first.get("response_format", pd.Series(None, index=first.index))
    ]
    out["has_tools"] = [_present(v) for v in first.get("tools", pd.Series(None, index=first.index))]
    out["model"] = model
    return out


def pairs_build(derived: pd.DataFrame, *, baseline_arm: str, metric: str) -> pd.DataFrame:
    """Candidate rows paired with their baseline row (same load, request, repeat).

    ``derived`` holds :func:`console.analysis.metrics.requests_derive`'s columns (``completed``,
    ``met_deadline`` and the metric column) and optionally the quality flags of
    :func:`console.analysis.quality.quality_flags` (missing = valid, no regression).
    Columns: ``arm``, ``load``, ``request_id``, ``repeat``, ``base``/``cand`` (the metric,
    seconds), ``benefit`` (base - cand, seconds; NaN when either is undefined), ``base_success``,
    ``cand_success`` (bool) and ``regression`` (bool).
    """
    column = METRICS[metric][0]
    frame = derived.copy()
    valid = frame["output_valid"].to_numpy(dtype=bool) if "output_valid" in frame else True
    frame["_success"] = (
        frame["completed"].to_numpy(dtype=bool) & frame["met_deadline"].to_numpy(dtype=bool) & valid
    )
    checks = [c for c in QUALITY_CHECKS if c in frame]
    keep = [*PAIR_KEYS, column, "_success", *checks]
    base = frame.loc[frame["arm"] == baseline_arm, keep].drop_duplicates(list(PAIR_KEYS))
    cand = frame.loc[frame["arm"] != baseline_arm, ["arm", *keep]]
    merged = cand.merge(base, on=list(PAIR_KEYS), suffixes=("_cand", "_base"), how="inner")
    regression = np.zeros(len(merged), dtype=bool)
    for c in checks:
        b = merged[f"{c}_base"].astype("boolean")
        k = merged[f"{c}_cand"].astype("boolean")
        regression |= ((b == True) & (k == False)).fillna(False).to_numpy(dtype=bool)  # noqa: E712
    out = pd.DataFrame(
        {
            "arm": merged["arm"].to_numpy(),
            "load": merged["load"].to_numpy(),
            "request_id": merged["request_id"].to_numpy(),
            "repeat": merged["repeat"].to_numpy(),
            "base": merged[f"{column}_base"].to_numpy(dtype=float),
            "cand": merged[f"{column}_cand"].to_numpy(dtype=float),
            "base_success": merged["_success_base"].to_numpy(dtype=bool),
            "cand_success": merged["_success_cand"].to_numpy(dtype=bool),
            "regression": regression,
        }
    )
    out["benefit"] = out["base"] - out["cand"]
    return out


def units_build(pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per (``arm``, ``request_id``): ``benefit`` (mean over its pairs with a defined
    benefit, seconds; NaN when none), ``success_delta`` (mean of cand_success - base_success over
    its pairs, in [-1, 1]), ``regression`` (any pair regressed), ``n_pairs``."""
    frame = pairs.assign(
        _delta=pairs["cand_success"].astype(float) - pairs["base_success"].astype(float),
    )
    grouped = frame.groupby(["arm", "request_id"], sort=True)
    out = pd.DataFrame(
        {
            "benefit": grouped["benefit"].mean(),
            "success_delta": grouped["_delta"].mean(),
            "regression": grouped["regression"].any(),
            "n_pairs": grouped.size(),
        }
    ).reset_index()
    return out


def benefit_interval(values: np.ndarray, *, stat: str, ci: float = 0.95) -> tuple[float, float, float]:
    """(point, lo, hi) of ``stat`` ("mean" or "p50") of the finite ``values`` (seconds): mean with a
    Student t interval, median with the order-statistic interval (module docstring). (NaN, NaN,
    NaN) when empty; lo = hi = NaN when too few values for an interval."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    n = values.size
    nan = float("nan")
    if n == 0:
        return nan, nan, nan
    if stat == "mean":
        point = float(values.mean())
        if n < 2:
            return point, nan, nan
        half = float(sps.t.ppf((1 + ci) / 2, n - 1)) * float(values.std(ddof=1)) / float(np.sqrt(n))
        return point, point - half, point + half
    if stat != "p50":
        raise ValueError(f"unknown statistic {stat!r}: use 'mean' or 'p50'")
    ordered = np.sort(values)
    point = float(np.median(ordered))
    j = int(sps.binom.ppf((1 - ci) / 2, n, 0.5))
    if j < 1:
        return point, nan, nan
    return point, float(ordered[j - 1]), float(ordered[n - j])


def rule_matches(when: Mapping[str, Any], features: pd.DataFrame) -> np.ndarray:
    """Boolean mask of the rows of ``features`` that satisfy every condition of ``when``."""
    mask = np.ones(len(features), dtype=bool)
    for name, value in when.items():
        if name not in features:
            raise FeatureError(f"rule condition on {name!r}, which the features do not have")
        mask &= (features[name] == value).to_numpy(dtype=bool)
    return mask


def policy_route(rules: Sequence[Mapping[str, Any]], features: pd.DataFrame) -> pd.DataFrame:
    """First matching rule per request (index as ``features``): ``rule`` (0-based index, -1 when
    none matches) and ``arm`` (the rule's arm label, None when off)."""
    rule = np.full(len(features), -1, dtype=np.int64)
    arm = np.full(len(features), None, dtype=object)
    free = np.ones(len(features), dtype=bool)
    for i, r in enumerate(rules):
        hit = free & rule_matches(r.get("when") or {}, features)
        rule[hit] = i
        arm[hit] = r.get("arm")
        free &= ~hit
    return pd.DataFrame({"rule": rule, "arm": arm}, index=features.index)


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


def _eligible(row: Mapping[str, Any], params: FitParams) -> str | None:
    """None when the slice may be enabled, else why not."""
    if row["n"] < params.min_support:
        return f"support {row['n']} < {params.min_support}"
    if row["regressions"] > 0:
        return f"{row['regressions']} quality regression(s)"
    if row["lost_successes"] > params.max_success_loss * row["n_requests"] + 1e-9:
        return f"loses {row['lost_successes']:g} successful request(s)"
    if not (np.isfinite(row["lo"]) and row["lo"] > 0):
        return "benefit interval does not exclude zero"
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


def rules_document(rules: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a router loads: the schema name, bucket edges and the rules (without the train
    statistics that :func:`policy_fit` attaches to each rule)."""
    return {
        "schema": SCHEMA,
        "buckets": buckets_spec(),
        "rules": [
            {
                "when": dict(r.get("when") or {}),
                "arm": r.get("arm"),
                "speculative_config": r.get("speculative_config"),
            }
            for r in rules
        ],
    }


def document_sha256(document: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of a router document."""
    return hashlib.sha256(canonical_json(document).encode("utf-8")).hexdigest()


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
