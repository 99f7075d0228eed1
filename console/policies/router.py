"""Slice policies' router: a rule list routes a request (first match wins), and the router
document a deployment reads, with its hash. Pure functions; no Django.

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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from console.jsonutil import canonical_json
from console.policies.features import FeatureError, buckets_spec

SCHEMA = "specreview.slice-policy/1"


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
