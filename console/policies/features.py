"""Slice policies' features: the allowlisted pre-execution features of each request, the
post-execution ones refused by name, and the token buckets. Pure functions; no Django. The
pipeline is told in :mod:`console.policies.fitting`.

:func:`request_features`: one row per request with the **allowlisted** pre-execution
   features only (``ALLOWED_FEATURES``) and the request's ``split``. It reads the trace's inputs
   (task, traffic class, prompt and max output tokens, response format, tools) and the target
   model, nothing else: output length, acceptance, latency and the output itself are known only
   after execution and cannot become a slice (hindsight). :func:`features_validate` refuses them
   by name with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from console.analysis.slices import PROMPT_LENGTH_EDGES, bucket_assign, bucket_labels

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
