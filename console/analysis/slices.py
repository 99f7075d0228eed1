"""Slice assignment: which task, traffic class and length buckets a request belongs to.

Pure functions over the per-request frame (see ``console.analysis.metrics`` for the column
contract). Bucket edges are constants so that the pages, the policy fitter and the tests all
name the same buckets.

Buckets are half-open ``[lo, hi)`` intervals in tokens, labelled ``"lo-hi"`` (``hi`` exclusive)
and ``"lo+"`` for the last one, e.g. ``"0-256"``, ``"256-1024"``, ``"4096+"``.

The output-length slice is the **baseline's** output length for the same request (median over
the baseline's rows with that ``request_id``), not each arm's own: a slice must hold the same
requests in every arm or the paired comparison inside it stops being paired. Requests the
baseline never answered fall back to their own ``num_output_tokens``.

A session's turn (the 0-based ``turn`` column of multi-turn traces) is a fifth dimension,
``turn_bucket`` ("0", "1", "2", "3+"), present only when the frame has a ``turn`` column with at
least two distinct turns: a single-turn trace has nothing to slice by turn.

An experiment's declared output-length buckets (``Experiment.output_buckets``, a matrix axis:
each bucket's requests replayed in runs of their own, with the bucket's output limit) are one
more, ``run_output_bucket``: the label of the run a row came from (``Run.output_bucket``, e.g.
"0-64", "256+"), present only when the frame has that column with at least two distinct
non-empty labels. Unlike ``output_bucket`` it is fixed before execution (the trace's recorded
length), and each bucket's runs are its own, so a bucket's throughput is over its own runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

# Edges in tokens. The last bucket is open-ended.
PROMPT_LENGTH_EDGES: tuple[int, ...] = (0, 256, 1024, 4096)
OUTPUT_LENGTH_EDGES: tuple[int, ...] = (0, 32, 128, 512)
# Token index within the answer at which a verification step started.
OUTPUT_POSITION_EDGES: tuple[int, ...] = (0, 16, 32, 64, 128, 256, 512)

SLICE_DIMENSIONS: tuple[str, ...] = ("task", "traffic_class", "prompt_bucket", "output_bucket")
TURN_DIMENSION = "turn_bucket"
RUN_BUCKET_DIMENSION = "run_output_bucket"  # the run's declared output bucket (Run.output_bucket)
# Turns from this one on share a bucket ("3+"): late turns are few, and a slice needs requests.
TURN_CAP = 3


def slice_dimensions(frame: pd.DataFrame) -> tuple[str, ...]:
    """The slice dimensions ``frame`` has: the four of ``SLICE_DIMENSIONS``, the declared output
    bucket when its runs carry two or more, and the turn bucket when ``slices_assign`` found more
    than one turn."""
    dims = SLICE_DIMENSIONS
    if RUN_BUCKET_DIMENSION in frame and frame[RUN_BUCKET_DIMENSION].dropna().nunique() > 1:
        dims = (*dims, RUN_BUCKET_DIMENSION)
    if TURN_DIMENSION in frame and frame[TURN_DIMENSION].dropna().nunique() > 1:
        dims = (*dims, TURN_DIMENSION)
    return dims


def turn_assign(turns: np.ndarray | pd.Series) -> np.ndarray:
    """Turn bucket label per 0-based turn index: ``"0"``, ``"1"``, ``"2"``, ``"3+"``; NaN gets None."""
    arr = np.asarray(turns, dtype=float)
    out = np.array([None if np.isnan(t) else (str(int(t)) if t < TURN_CAP else f"{TURN_CAP}+") for t in arr], dtype=object)
    return out


def bucket_labels(edges: Sequence[int]) -> list[str]:
    """Labels for ``edges``: ``"lo-hi"`` per closed bucket, ``"lo+"`` for the last one."""
    labels = [f"{lo}-{hi}" for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    labels.append(f"{edges[-1]}+")
    return labels


def bucket_assign(values: np.ndarray | pd.Series, *, edges: Sequence[int]) -> np.ndarray:
    """Bucket label per value (tokens). Values below ``edges[0]`` go to the first bucket;
    NaN gets ``None``."""
    arr = np.asarray(values, dtype=float)
    labels = np.array(bucket_labels(edges), dtype=object)
    idx = np.searchsorted(np.asarray(edges, dtype=float), arr, side="right") - 1
    idx = np.clip(idx, 0, len(edges) - 1)
    out = labels[idx]
    out[np.isnan(arr)] = None
    return out


def slices_assign(requests: pd.DataFrame, *, baseline_arm: str | None = None) -> pd.DataFrame:
    """Return a copy of ``requests`` with ``prompt_bucket`` and ``output_bucket`` columns (and
    ``turn_bucket`` when it has a ``turn`` column; a ``run_output_bucket`` column it has keeps
    its labels, an empty one read as None).

    ``prompt_bucket`` buckets ``prompt_tokens``; ``output_bucket`` buckets the baseline's
    median ``num_output_tokens`` for the request (see module docstring). ``baseline_arm``
    defaults to the arm whose rows have ``is_baseline`` true.
    """
    out = requests.copy(deep=False)  # columns are added whole: the input stays as it was
    out["prompt_bucket"] = bucket_assign(out["prompt_tokens"].to_numpy(), edges=PROMPT_LENGTH_EDGES)
    if baseline_arm is None and "is_baseline" in out and out["is_baseline"].any():
        baseline_arm = str(out.loc[out["is_baseline"].astype(bool), "arm"].iloc[0])
    own = out["num_output_tokens"].astype(float)
    if baseline_arm is not None:
        base = out.loc[out["arm"] == baseline_arm]
        median_by_request = base.groupby("request_id")["num_output_tokens"].median()
        length = out["request_id"].map(median_by_request).astype(float).fillna(own)
    else:
        length = own
    out["output_bucket"] = bucket_assign(length.to_numpy(), edges=OUTPUT_LENGTH_EDGES)
    if "turn" in out:
        out[TURN_DIMENSION] = turn_assign(out["turn"].to_numpy())
    if RUN_BUCKET_DIMENSION in out:  # an empty label is a run of every request: no bucket
        labels = out[RUN_BUCKET_DIMENSION].astype(object)
        out[RUN_BUCKET_DIMENSION] = labels.where(labels.notna() & (labels != ""), None)
    return out
