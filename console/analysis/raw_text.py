"""Raw text in the analysis's pages and downloads (issue 24): the stored comparison keeps each
first divergence's text (the common context and both continuations) and the results frame each
model output; a person without ``access.raw_text_allowed`` gets the placeholder in their place,
with positions, counts, flags and ids kept."""

from __future__ import annotations

from typing import Any

import pandas as pd

from console.accounts.access import RAW_TEXT_HIDDEN, raw_text_shown
from console.analysis.comparison.schema import Summary

DIVERGENCE_TEXT_FIELDS = ("context", "baseline_text", "candidate_text")
RESULT_TEXT_COLUMNS = ("output_text",)


def summary_shown(summary: Summary, *, raw_text: bool) -> Summary:
    """``summary`` itself, or a copy whose first divergences carry the placeholder for their text."""
    if raw_text or not summary.quality.first_divergences:
        return summary
    hidden = tuple(
        d.model_copy(update={f: raw_text_shown(getattr(d, f), allowed=False) for f in DIVERGENCE_TEXT_FIELDS})
        for d in summary.quality.first_divergences
    )
    return summary.model_copy(
        update={"quality": summary.quality.model_copy(update={"first_divergences": hidden})}
    )


def stored_shown(stored: dict[str, Any], *, raw_text: bool) -> dict[str, Any]:
    """The stored comparison JSON as downloaded: itself, or a copy with the divergence text hidden."""
    quality = stored.get("quality")
    if raw_text or not isinstance(quality, dict) or not quality.get("first_divergences"):
        return stored
    hidden = [
        {k: raw_text_shown(v, allowed=False) if k in DIVERGENCE_TEXT_FIELDS else v for k, v in d.items()}
        for d in quality["first_divergences"]
    ]
    return stored | {"quality": quality | {"first_divergences": hidden}}


def results_frame_shown(frame: pd.DataFrame, *, raw_text: bool) -> pd.DataFrame:
    """The per-request results frame, with each non-empty model output replaced by the placeholder."""
    if raw_text:
        return frame
    out = frame.copy()
    for column in RESULT_TEXT_COLUMNS:
        if column in out:
            text = out[column].fillna("").astype(str)
            out[column] = text.where(text == "", RAW_TEXT_HIDDEN)
    return out
