"""Kept only for importers outside this change (the policies' forms, selectors, services and
views) until they import the modules below; removed at merge."""

from console.jsonutil import canonical_json  # moved: console/jsonutil.py
from console.policies.features import (  # moved: console/policies/features.py
    ALLOWED_FEATURES,
    DEFAULT_FEATURES,
    FeatureError,
    features_validate,
    request_features,
)
from console.policies.fitting import (  # moved: console/policies/fitting.py
    FitParams,
    overfitting_flags,
    policy_fit,
    policy_score,
)
from console.policies.pairs import METRICS, pairs_build, units_build  # moved: console/policies/pairs.py
from console.policies.router import (  # moved: console/policies/router.py
    document_sha256,
    policy_route,
    rules_document,
)

__all__ = [
    "ALLOWED_FEATURES",
    "DEFAULT_FEATURES",
    "METRICS",
    "FeatureError",
    "FitParams",
    "canonical_json",
    "document_sha256",
    "features_validate",
    "overfitting_flags",
    "pairs_build",
    "policy_fit",
    "policy_route",
    "policy_score",
    "request_features",
    "rules_document",
    "units_build",
]
