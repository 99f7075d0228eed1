"""Hand-checkable inputs for the pure policy functions: features and units per request."""

from __future__ import annotations

import pandas as pd

ARM_CONFIGS = {
    "k2": {"method": "ngram", "num_speculative_tokens": 2},
    "k4": {"method": "ngram", "num_speculative_tokens": 4},
}


def features_frame(rows: list[dict]) -> pd.DataFrame:
    """One row per request: ``request_id`` plus features (defaults: chat, interactive, short
    prompt, no schema or tools, model m, train)."""
    base = {
        "split": "train",
        "task": "chat",
        "traffic_class": "interactive",
        "prompt_tokens_bucket": "0-256",
        "max_tokens_bucket": "64-256",
        "has_schema": False,
        "has_tools": False,
        "model": "m",
    }
    return pd.DataFrame([base | r for r in rows]).set_index("request_id")


def units_frame(rows: list[dict]) -> pd.DataFrame:
    """One row per (arm, request): defaults arm k2, no success change, no regression."""
    base = {"arm": "k2", "success_delta": 0.0, "regression": False, "n_pairs": 1}
    return pd.DataFrame([base | r for r in rows])


def slice_requests(prefix: str, benefits: list[float], *, arm: str = "k2", **features) -> tuple[list, list]:
    """Requests ``prefix0..`` with the given benefits (seconds) for ``arm`` and features."""
    feats, units = [], []
    for i, b in enumerate(benefits):
        rid = f"{prefix}{i}"
        feats.append({"request_id": rid, **features})
        units.append({"arm": arm, "request_id": rid, "benefit": b})
    return feats, units
