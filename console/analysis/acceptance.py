"""Verification steps and acceptance: each request's drafted/accepted steps flattened, per-request
totals, acceptance and tokens per target pass per group, per draft and output position, and a
server's spec-decode counters. vLLM's definitions, the same on every engine (see
:mod:`console.analysis.metrics`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from console.analysis.metrics import group_codes, lists_flatten
from console.analysis.slices import OUTPUT_POSITION_EDGES, bucket_labels

# Engines whose first output token comes from the prefill, outside every verification step.
PREFILL_TOKEN_ENGINES = frozenset({"vllm", "openai"})


def _cap_cut_drafts(
    accepted: np.ndarray, *, rows: np.ndarray, dlens: np.ndarray, tokens: np.ndarray, requests: pd.DataFrame
) -> np.ndarray:
    """Accepted draft tokens are the ones the user received: a request's last step, cut short by
    ``max_tokens`` or EOS, keeps only what was emitted. The hf seam records it that way already
    (sum of accepted + 1 over steps = tokens); vLLM's counters count the verified matches,
    cut ones included, with the prefill's token outside any step, so there the last step is
    reduced by what provably was never emitted. The same definition on every engine."""
    if accepted.size == 0:
        return accepted
    engines = requests["engine"].to_numpy() if "engine" in requests else np.full(len(requests), "hf")
    prefill = np.isin(engines, list(PREFILL_TOKEN_ENGINES)).astype(np.int64)
    total = np.bincount(rows, weights=accepted + 1, minlength=dlens.size).astype(np.int64)
    excess = np.maximum(total - np.maximum(tokens - prefill, 0), 0)
    last = np.cumsum(dlens) - 1
    has = (dlens > 0) & (excess > 0)
    if not has.any():
        return accepted
    out = accepted.copy()
    idx = last[has]
    out[idx] = np.maximum(out[idx] - excess[has], 0)
    return out


def steps_flatten(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per verification step: ``row`` (positional row in ``requests``), ``step`` (0-based),
    ``drafted`` and ``accepted`` (tokens), ``output_position`` (answer tokens emitted before the
    step, see :mod:`console.analysis.metrics`) and ``position_bucket_idx`` (index into ``OUTPUT_POSITION_EDGES``;
    labels from ``slices.bucket_labels``).

    Raises ValueError when a request's ``drafted`` and ``accepted`` lists differ in length or a
    step accepts more than it drafted.
    """
    drafted, dlens = lists_flatten(requests["drafted"], np.int64)
    accepted, alens = lists_flatten(requests["accepted"], np.int64)
    ids = requests["request_id"].to_numpy()
    if not np.array_equal(dlens, alens):
        raise ValueError(f"drafted/accepted lengths differ for requests {list(ids[dlens != alens][:5])}")
    bad = accepted > drafted
    if bad.any() or (accepted < 0).any():
        rows = np.repeat(np.arange(dlens.size), dlens)[bad | (accepted < 0)]
        raise ValueError(f"accepted outside [0, drafted] for requests {list(ids[np.unique(rows)][:5])}")
    rows = np.repeat(np.arange(dlens.size), dlens)
    starts = np.cumsum(dlens) - dlens
    tokens = requests["num_output_tokens"].fillna(0).to_numpy(dtype=np.int64)
    accepted = _cap_cut_drafts(accepted, rows=rows, dlens=dlens, tokens=tokens, requests=requests)
    emitted = accepted + 1
    cum = np.cumsum(emitted)
    base = np.zeros(dlens.size, dtype=np.int64)
    nonempty = dlens > 0
    base[nonempty] = cum[starts[nonempty]] - emitted[starts[nonempty]]
    before_in_request = cum - emitted - np.repeat(base, dlens)
    total_by_row = np.zeros(dlens.size, dtype=np.int64)
    np.add.at(total_by_row, rows, emitted)
    offset = np.maximum(tokens - total_by_row, 0)
    position = before_in_request + offset[rows]
    return pd.DataFrame(
        {
            "row": rows,
            "step": np.arange(drafted.size) - np.repeat(starts, dlens),
            "drafted": drafted,
            "accepted": accepted,
            "output_position": position,
            "position_bucket_idx": np.clip(
                np.searchsorted(np.asarray(OUTPUT_POSITION_EDGES), position, side="right") - 1, 0, None
            ),
        }
    )


def _compact(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(present codes sorted, dense code per element) for small non-negative codes, in O(n)."""
    if codes.size == 0:
        return np.zeros(0, dtype=np.int64), codes
    counts = np.bincount(codes)
    present = np.flatnonzero(counts)
    lookup = np.zeros(counts.size, dtype=np.int64)
    lookup[present] = np.arange(present.size)
    return present, lookup[codes]


def _step_groups(
    steps: pd.DataFrame, keys: pd.DataFrame, by: Sequence[str]
) -> tuple[np.ndarray, pd.DataFrame]:
    """Group code per step and the groups' keys: request-level columns are factorized over the
    (small) request frame and carried to the steps through ``steps.row``."""
    request_by = [c for c in by if c != "position_bucket"]
    req_codes, gkeys = group_codes(keys, request_by)
    codes = req_codes[steps["row"].to_numpy()]
    if "position_bucket" in by:
        labels = np.array(bucket_labels(OUTPUT_POSITION_EDGES), dtype=object)
        bucket = steps["position_bucket_idx"].to_numpy()
        codes = codes * len(labels) + bucket
        present, codes = _compact(codes)
        gkeys = gkeys.iloc[present // len(labels)].reset_index(drop=True)
        gkeys.insert(len(gkeys.columns), "position_bucket", labels[present % len(labels)])
        gkeys["position_start"] = np.asarray(OUTPUT_POSITION_EDGES)[present % len(labels)]
    else:
        present, codes = _compact(codes)
        gkeys = gkeys.iloc[present].reset_index(drop=True)
    return codes.astype(np.int64), gkeys


def steps_per_request(steps: pd.DataFrame, *, n_rows: int) -> pd.DataFrame:
    """The steps summed per request: one row per request that has steps, with ``row``,
    ``n_steps``, ``drafted`` and ``accepted`` (tokens). :func:`acceptance_aggregate` takes it in
    place of the steps for groupings without ``position_bucket``, at a fraction of the cost."""
    rows = steps["row"].to_numpy()
    n_steps = np.bincount(rows, minlength=n_rows)
    n_drafts = np.bincount(rows, weights=(steps["drafted"].to_numpy() > 0), minlength=n_rows)
    present = np.flatnonzero(n_steps)
    return pd.DataFrame(
        {
            "row": present,
            "n_steps": n_steps[present],
            "n_drafts": np.rint(n_drafts[present]).astype(np.int64),
            "drafted": np.bincount(rows, weights=steps["drafted"].to_numpy(), minlength=n_rows)[
                present
            ].astype(np.int64),
            "accepted": np.bincount(rows, weights=steps["accepted"].to_numpy(), minlength=n_rows)[
                present
            ].astype(np.int64),
        }
    )


def request_totals_merge(request_steps: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """:func:`steps_per_request`'s frame plus one row per request that has no steps but a
    server's per-request totals (``spec_totals``: ``{"drafts", "draft_tokens", "accepted"}``,
    vLLM's ``summary`` level), so that acceptance per task, class and arm counts them too.
    Per-position and output-position tables need steps: these requests are not in them.

    The same definition as :func:`_cap_cut_drafts`: the prefill's token is outside every draft
    and accepted tokens never emitted (cut by ``max_tokens`` or EOS) are taken off, here from
    the request's total (the totals do not say which step they came from).
    """
    if "spec_totals" not in requests:
        return request_steps
    has_steps = np.zeros(len(requests), dtype=bool)
    has_steps[request_steps["row"].to_numpy()] = True
    totals = requests["spec_totals"].tolist()
    tokens = requests["num_output_tokens"].fillna(0).to_numpy(dtype=np.int64)
    rows = []
    for i, t in enumerate(totals):
        if has_steps[i] or not isinstance(t, Mapping) or not t.get("drafts"):
            continue
        drafts, drafted, accepted = int(t["drafts"]), int(t["draft_tokens"]), int(t["accepted"])
        excess = max(drafts + accepted - max(int(tokens[i]) - 1, 0), 0)
        rows.append((i, drafts, drafts, drafted, max(accepted - excess, 0)))
    if not rows:
        return request_steps
    extra = pd.DataFrame(rows, columns=["row", "n_steps", "n_drafts", "drafted", "accepted"])
    return pd.concat([request_steps, extra], ignore_index=True).sort_values("row", kind="stable").reset_index(drop=True)


def acceptance_aggregate(steps: pd.DataFrame, keys: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """Acceptance per group. ``keys`` is the per-request frame whose positional rows ``steps.row``
    refers to; ``by`` may name its columns and ``position_bucket`` (then ``position_start``, the
    bucket's lower edge in tokens, is added for ordering). Groups without steps are absent.
    ``steps`` may also be :func:`steps_per_request`'s frame (rows weighted by ``n_steps``).

    Columns: keys, ``steps`` (target passes), ``drafted`` and ``accepted`` (Σ tokens),
    ``acceptance_rate`` (Σaccepted / Σdrafted, NaN when nothing was drafted),
    ``accepted_per_pass`` (mean(accepted + 1), tokens per target pass).
    """
    codes, out = _step_groups(steps, keys, by)
    n = len(out)
    weights = steps["n_steps"].to_numpy() if "n_steps" in steps else None
    out["steps"] = np.rint(np.bincount(codes, weights=weights, minlength=n)).astype(np.int64)
    out["drafted"] = np.bincount(codes, weights=steps["drafted"].to_numpy(), minlength=n).astype(np.int64)
    out["accepted"] = np.bincount(codes, weights=steps["accepted"].to_numpy(), minlength=n).astype(np.int64)
    drafting = steps["n_drafts"].to_numpy() if "n_drafts" in steps else (steps["drafted"].to_numpy() > 0)
    out["drafts"] = np.rint(np.bincount(codes, weights=drafting, minlength=n)).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["acceptance_rate"] = np.where(out["drafted"] > 0, out["accepted"] / out["drafted"], np.nan)
        out["mean_acceptance_length"] = np.where(out["drafts"] > 0, 1 + out["accepted"] / out["drafts"], np.nan)
        out["accepted_per_pass"] = (out["accepted"] + out["steps"]) / out["steps"]
    return out


def tokens_per_pass(request_steps: pd.DataFrame, derived: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """Output tokens per target pass per group, over every completed request (drafting or not):
    Σ tokens / Σ passes with passes = recorded steps + tokens no step produced (see module
    docstring). ``request_steps`` is :func:`steps_per_request`'s frame over ``derived``'s rows.
    Columns: keys, ``target_passes``, ``tokens_per_pass`` (NaN when no tokens)."""
    n = len(derived)
    tokens = derived["num_output_tokens"].fillna(0).to_numpy(dtype=float)
    done = derived["completed"].to_numpy(dtype=bool) if "completed" in derived else np.ones(n, dtype=bool)
    tokens = np.where(done, tokens, 0.0)
    steps = np.zeros(n)
    emitted = np.zeros(n)
    if len(request_steps):
        rows = request_steps["row"].to_numpy()
        steps[rows] = request_steps["n_steps"].to_numpy()
        emitted[rows] = request_steps["accepted"].to_numpy() + request_steps["n_steps"].to_numpy()
    passes = np.where(tokens > 0, steps + np.maximum(tokens - emitted, 0.0), 0.0)
    codes, out = group_codes(derived, by)
    k = len(out)
    total_tokens = np.bincount(codes, weights=tokens, minlength=k)
    total_passes = np.bincount(codes, weights=passes, minlength=k)
    out["target_passes"] = np.rint(total_passes).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["tokens_per_pass"] = np.where(total_passes > 0, total_tokens / total_passes, np.nan)
    return out


def acceptance_by_position(steps: pd.DataFrame, keys: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """Per-position acceptance per group: one row per group and draft position j = 1..max k.

    Columns: keys, ``position`` (1-based), ``proposed`` (steps with k >= j), ``accepted`` (steps
    with a >= j), ``drafts`` (steps with k > 0 in the group), ``rate_per_draft`` = accepted /
    drafts (vLLM's per-position acceptance rate), ``rate`` = accepted / proposed =
    P(position j accepted | proposed) (conditional).
    """
    if steps.empty:
        return pd.DataFrame(
            columns=[*by, "position", "proposed", "accepted", "drafts", "rate_per_draft", "rate"]
        )
    codes, gkeys = _step_groups(steps, keys, by)
    kmax = int(steps["drafted"].max())
    n_groups = len(gkeys)
    width = kmax + 1

    def at_least(values: np.ndarray) -> np.ndarray:
        hist = np.bincount(codes * width + values, minlength=n_groups * width).reshape(n_groups, width)
        return np.cumsum(hist[:, ::-1], axis=1)[:, ::-1]  # [g, j] = #(values >= j)

    proposed = at_least(steps["drafted"].to_numpy())[:, 1:]
    accepted = at_least(steps["accepted"].to_numpy())[:, 1:]
    out = gkeys.loc[gkeys.index.repeat(kmax)].reset_index(drop=True)
    out["position"] = np.tile(np.arange(1, kmax + 1), n_groups)
    out["proposed"] = proposed.ravel()
    out["accepted"] = accepted.ravel()
    out["drafts"] = np.repeat(proposed[:, 0], kmax) if kmax else np.zeros(0, dtype=np.int64)
    out = out[out["proposed"] > 0].reset_index(drop=True)
    out["rate_per_draft"] = out["accepted"] / out["drafts"]
    out["rate"] = out["accepted"] / out["proposed"]
    return out


SERVER_DRAFTS = "spec_decode_num_drafts"
SERVER_DRAFT_TOKENS = "spec_decode_num_draft_tokens"
SERVER_ACCEPTED = "spec_decode_num_accepted_tokens"
SERVER_ACCEPTED_PER_POS = "spec_decode_num_accepted_tokens_per_pos"
# How a run's totals were read (the worker's ``spec_decode_source``; absent: vLLM's counter
# deltas) and the summary of gauges sampled through a run (SGLang), as the workers store them.
SERVER_SOURCE = "spec_decode_source"
SUMMED_ITERATIONS = "summed iteration statistics"
SERVER_SAMPLED = "spec_sampled"


def server_counters_sum(counters: Sequence[Mapping | None]) -> dict[str, object] | None:
    """The spec-decode counter deltas of several runs summed: ``drafts``, ``drafted``,
    ``accepted`` (tokens) and ``accepted_per_pos`` (list, position 0 first). None when any run
    lacks the three totals (a server without spec-decode counters, or a page it could not
    read), or sums TensorRT-LLM's iteration statistics over no iteration or with a poll lost: a
    partial sum would read as less drafting than happened."""
    out: dict[str, object] = {"drafts": 0, "drafted": 0, "accepted": 0, "accepted_per_pos": []}
    per_pos: list[int] = []
    if not counters:
        return None
    for c in counters:
        if not isinstance(c, Mapping) or not all(
            isinstance(c.get(k), int | float) for k in (SERVER_DRAFTS, SERVER_DRAFT_TOKENS, SERVER_ACCEPTED)
        ):
            return None
        if c.get(SERVER_SOURCE) == SUMMED_ITERATIONS and (
            not c.get("server_iterations") or c.get("server_polls_failed")
        ):
            return None  # no iteration polled in the window, or some lost: zeros would be no evidence
        out["drafts"] = int(out["drafts"]) + int(c[SERVER_DRAFTS])  # type: ignore[call-overload]
        out["drafted"] = int(out["drafted"]) + int(c[SERVER_DRAFT_TOKENS])  # type: ignore[call-overload]
        out["accepted"] = int(out["accepted"]) + int(c[SERVER_ACCEPTED])  # type: ignore[call-overload]
        for j, v in enumerate(c.get(SERVER_ACCEPTED_PER_POS) or []):
            if j >= len(per_pos):
                per_pos.append(0)
            per_pos[j] += int(v)
    out["accepted_per_pos"] = per_pos
    return out


def server_acceptance(totals: Mapping) -> dict[str, object]:
    """Acceptance from run-level counter totals (:func:`server_counters_sum`), by the one
    definition every engine uses: rate = accepted / drafted, mean acceptance length = 1 +
    accepted / drafts, per-position rate (vLLM's) = accepted at position j / drafts. NaN where
    nothing was drafted. The conditional rate per position needs per-step data: not here."""
    drafts, drafted, accepted = int(totals["drafts"]), int(totals["drafted"]), int(totals["accepted"])
    per_pos = [int(v) for v in totals.get("accepted_per_pos") or []]
    return {
        "drafts": drafts,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else float("nan"),
        "mean_acceptance_length": 1 + accepted / drafts if drafts else float("nan"),
        "rate_per_draft_by_position": [v / drafts for v in per_pos] if drafts else [],
    }


def server_totals_source(counters: Sequence[Mapping | None]) -> str | None:
    """How the runs' totals were read: ``SUMMED_ITERATIONS`` when every run summed TensorRT-LLM's
    iteration statistics, else None (counter deltas)."""
    sources = {c.get(SERVER_SOURCE) if isinstance(c, Mapping) else None for c in counters}
    return SUMMED_ITERATIONS if sources == {SUMMED_ITERATIONS} else None


def server_sampled_acceptance(counters: Sequence[Mapping | None]) -> dict[str, object] | None:
    """Acceptance from spec-decode gauges sampled through each run (SGLang's ``spec_sampled``),
    or None unless every run has a summary with a usable reading.

    A gauge gives the mean acceptance length (tokens per verification, 1 + accepted / drafts)
    but no counts: ``drafts``/``drafted``/``accepted`` are None, except 0 when every run's
    server says it runs no speculative algorithm. ``mean_acceptance_length`` is the mean of the
    runs' figures weighted by their readings; ``acceptance_rate`` is None (the server's own rate
    is not vLLM's definition); ``drafted_evidence`` is True when any run shows drafting, False
    when none does.
    """
    raw = [c.get(SERVER_SAMPLED) if isinstance(c, Mapping) else None for c in counters]
    summaries = [s for s in raw if isinstance(s, Mapping) and s.get("samples_used")]
    if not raw or len(summaries) < len(raw):
        return None
    weighted = [
        (float(s["mean_acceptance_length"]), int(s["samples_used"]))
        for s in summaries
        if isinstance(s.get("mean_acceptance_length"), int | float)
    ]
    weight = sum(w for _, w in weighted)
    zero = 0 if all(s.get("spec_decode") == "not configured" for s in summaries) else None
    return {
        "drafts": zero,
        "drafted": zero,
        "accepted": zero,
        "acceptance_rate": None,
        "mean_acceptance_length": sum(v * w for v, w in weighted) / weight if weight else None,
        "rate_per_draft_by_position": None,
        "drafted_evidence": any(s.get("drafted_evidence") for s in summaries),
    }
