"""The knee of a draft-length sweep."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def knee_find(
    ks: Sequence[int], gains_lo: Sequence[float], *, margin_s: float = 0.0
) -> dict[str, object]:
    """Knee of a draft-length sweep: the first ``ks[i]`` whose step to ``ks[i + 1]`` no longer
    pays for sure, i.e. the lower bound of that step's gain interval is at or below
    ``margin_s`` (seconds; 0 by default, or a practical margin set on the experiment).

    ``ks`` are sorted draft lengths; ``gains_lo[i]`` the lower bound of the improvement
    (seconds, positive = faster) from ``ks[i]`` to ``ks[i + 1]``; NaN (not measured) stops the
    sweep there too. ``reached`` is False when every step pays (knee = the largest k tested)."""
    for i, lo in enumerate(gains_lo):
        if not np.isfinite(lo) or lo <= margin_s:
            return {"knee_k": int(ks[i]), "reached": True}
    return {"knee_k": int(ks[-1]) if len(ks) else None, "reached": False}
