"""Train/holdout assignment by a stable hash.

A request's split depends only on the trace key and its request id, never on file order or on the
other requests, so re-importing a trace (in any order) gives every request the same split. The trace
key is ``seed:<import seed>``: a different seed gives a different, equally stable split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

TRAIN = "train"
HOLDOUT = "holdout"


def split_trace_key(*, seed: int) -> str:
    return f"seed:{seed}"


def split_for(*, trace_key: str, request_id: str, holdout_fraction: float) -> str:
    """'holdout' for about ``holdout_fraction`` (0..1) of request ids, 'train' for the rest."""
    digest = hashlib.blake2b(f"{trace_key}\x1f{request_id}".encode(), digest_size=8).digest()
    return HOLDOUT if int.from_bytes(digest, "big") < holdout_fraction * 2.0**64 else TRAIN


def split_assigner(*, trace_key: str, holdout_fraction: float) -> Callable[[str], str]:
    """``split_for`` with the trace key and fraction bound, for one import's many string ids."""
    prefix = f"{trace_key}\x1f".encode()
    bound = holdout_fraction * 2.0**64
    blake2b = hashlib.blake2b
    from_bytes = int.from_bytes

    def assign(request_id: str) -> str:
        digest = blake2b(prefix + request_id.encode(), digest_size=8).digest()
        return HOLDOUT if from_bytes(digest, "big") < bound else TRAIN

    return assign
