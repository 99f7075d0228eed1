"""Per-request latency metrics derived from a run's request rows: the input contract and every
definition the analysis modules share.

Pure functions over pandas/numpy; no Django. Times are seconds, lengths are tokens, money is USD,
memory is bytes, energy is joules.

Input contract (one row per request per run)
--------------------------------------------
``run_id`` int, ``arm`` str, ``is_baseline`` bool, ``load`` str, ``rate_multiplier`` float,
``repeat`` int, ``request_id`` str, ``task`` str, ``traffic_class`` ("interactive"|"batch"),
``prompt_tokens`` int, ``max_tokens`` int, ``scheduled_s``/``sent_s``/``first_token_s``/``finish_s``
float seconds from run start (``first_token_s``/``finish_s`` NaN when failed or no output),
``queue_s`` float, ``chunk_times`` list[float] or 1-d array (seconds from run start, one per visible chunk),
``chunk_tokens`` list[int] (tokens per chunk), ``num_output_tokens`` int, ``output_token_ids``
list[int], ``output_text`` str, ``finish_reason`` str|None, ``error`` str|None (non-empty means
failed), ``drafted``/``accepted`` list[int] per verification step (empty for the baseline),
optional ``spec_totals`` dict|None (a server's per-request totals without steps, see
:func:`request_totals_merge`),
``response_format`` dict|None, ``tools`` list|None. Optional ``result_id`` is passed through to
regression lists. Optional ``session_id`` str and ``turn`` int (0-based) place a request in its
conversation (see :func:`session_columns`: a request alone is a session of one turn).

Runs frame (one row per run): ``run_id, arm, load, repeat, wall_s, peak_memory_bytes,
mean_util`` (percent 0-100, as NVML gives it), ``energy_j`` (NaN when unmeasured),
``accelerator_count`` (default 1).

Definitions
-----------
- **completed**: no error, ``finish_s`` finite and ``finish_reason`` not null. Everything else is
  **failed**. Latency metrics are computed over completed requests only (NaN for failed ones);
  failures show up in completed requests/s, goodput, attainment and cost per successful task.
- **TTFT** = ``first_token_s - scheduled_s``: the user issued the request at its scheduled time,
  so client-side queueing counts. ``ttft_from_send_s`` = ``first_token_s - sent_s``.
- **e2e** = ``finish_s - scheduled_s``. **queue** = the ``queue_s`` column as given.
- **TPOT** = (e2e - TTFT) / (tokens - 1); NaN when tokens < 2.
- **Inter-token gap per chunk**: the differences of consecutive ``chunk_times`` (what the user
  sees; a chunk of several speculative tokens is one gap). The first chunk has no gap (it is TTFT).
- **Inter-token gap per token**: a chunk of n tokens arriving g seconds after the previous chunk
  counts as n gaps of g/n; the first chunk's extra n0 - 1 tokens arrived with the first token and
  count as gaps of 0. So a request has tokens - 1 per-token gaps summing to
  ``chunk_times[-1] - chunk_times[0]``, and their mean equals TPOT when the last chunk is the finish.
- **Zero output tokens**: a completed request with no output has e2e (it finished), no TTFT,
  TPOT or gaps (NaN). For its TTFT deadline the finish time stands in for the first token: the
  user had the (empty) answer then.
- **Deadlines**: ``{"interactive": {"e2e_s": 10, "ttft_s": 1}, "batch": {"e2e_s": 120}}``; a
  missing class or key means no limit. ``met_deadline`` = completed and within every limit.
- **Throughput** over a group: completed / Σ wall_s of the runs in the group (requests/s);
  output tokens of completed requests / Σ wall_s (tokens/s); goodput = met_deadline / Σ wall_s;
  attainment = met_deadline / requests. For a slice, wall_s is the whole run's: the slice's share.
- **Speculation** (vLLM's definitions, the same on every engine): per verification step k
  proposed, a accepted; a step with k > 0 is a **draft**. Acceptance rate = Σa / Σk; mean
  acceptance length = 1 + Σa / drafts; per-position rate (vLLM) = accepted at position j /
  drafts, beside the conditional rate accepted at j / proposed at j; position j (1-based) is
  proposed iff k >= j and accepted iff a >= j. **Tokens per target pass** is its own metric, over
  every decoding pass, drafting or not: output tokens / (steps + tokens not produced by a step,
  the prefill's first token among them); 1.0 for plain decoding. ``accepted_per_pass`` =
  mean(a + 1) over recorded steps. A draft cut short by ``max_tokens`` or EOS counts as drafted
  in full and as accepted only for the tokens the user received (see ``_cap_cut_drafts`` and
  ``docs/statistics.md``), the same on every engine. A step's **output position** is the number of answer tokens
  emitted before it: steps are assumed to produce the last Σ(a + 1) tokens of the answer (what
  comes before, e.g. the prefill's token, is the offset ``max(0, tokens - Σ(a + 1))``).
- **Sessions**: a later turn's ``scheduled_s`` is its previous turn's finish plus its think time,
  so its TTFT counts no think time. **Session duration** = last turn's ``finish_s`` - first turn's
  ``scheduled_s`` (seconds), over sessions whose every turn completed; it includes think times.
  TTFT by turn shows what a longer context (the conversation so far) costs.
- **Busy time** (``busy_s``) of a run: the length of the union of its requests' intervals
  [``sent_s``, ``finish_s``], the seconds with at least one request in flight (failed requests
  count until they ended; stored results hold measured requests only, never the warm-up).
- **Cost** (cost basis ``"busy_time"``, :data:`COST_BASIS`): accelerator-hours = busy_s / 3600 x
  accelerator_count; cost = accelerator-hours x cost_per_hour_usd (+ energy_j / 3.6e6 kWh x
  power price when both are known). Not the replay window ``wall_s``: below saturation an
  open-loop window is mostly the trace's arrival span, the same for every arm, so a cost on it
  could not tell a faster engine from a slower one. ``wall_s`` stays the denominator of
  throughput (offered-load requests/s). Success = completed, met_deadline and ``output_valid``
  (quality checks, where applicable).

Where each part lives
---------------------
This module derives the per-request frame (:func:`requests_derive`, :func:`gaps_flatten`) and
success; aggregates per group are in :mod:`console.analysis.latency` (latency and throughput),
:mod:`console.analysis.acceptance` (verification steps, acceptance, server counters),
:mod:`console.analysis.cost` (busy time, cost, goodput) and :mod:`console.analysis.sessions`
(multi-turn conversations).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)
STATS: tuple[str, ...] = tuple(f"p{p}" for p in PERCENTILES) + ("mean",)
# Per-request latency columns produced by requests_derive (seconds).
REQUEST_METRICS: tuple[str, ...] = (
    "ttft_s",
    "ttft_from_send_s",
    "tpot_s",
    "e2e_s",
    "queue_s",
    "itl_chunk_mean_s",
)
# Pooled gap distributions (seconds), available per run and per arm x load.
GAP_METRICS: tuple[str, ...] = ("itl_chunk_s", "itl_token_s")

Deadlines = Mapping[str, Mapping[str, float]]


def lists_flatten(column: pd.Series, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """Flatten a column of lists: (values, length per row). ``None``/NaN rows count as empty."""
    items = column.tolist()
    if items and all(type(x) is np.ndarray for x in items):  # results_frames' cells: one concatenate
        lens = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        return np.concatenate(items).astype(dtype, copy=False), lens
    try:
        lens = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    except TypeError:  # None or NaN somewhere: treat as empty
        items = [x if isinstance(x, list | tuple | np.ndarray) else () for x in items]
        lens = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    flat: np.ndarray = np.fromiter(itertools.chain.from_iterable(items), dtype=dtype, count=int(lens.sum()))
    return flat, lens


def _failed_mask(requests: pd.DataFrame) -> np.ndarray:
    error = requests["error"]
    has_error = error.notna().to_numpy() & (error.fillna("").astype(str).str.len() > 0).to_numpy()
    finish = requests["finish_s"].to_numpy(dtype=float)
    return has_error | ~np.isfinite(finish) | requests["finish_reason"].isna().to_numpy()


def _deadline_limits(traffic_class: pd.Series, deadlines: Deadlines | None, key: str) -> np.ndarray:
    limits = {cls: float(d[key]) for cls, d in (deadlines or {}).items() if d and d.get(key) is not None}
    return traffic_class.map(limits).astype(float).fillna(np.inf).to_numpy()


def chunk_times_flatten(requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """All ``chunk_times`` in one array (seconds) and the number of chunks per row. Pass it to
    :func:`requests_derive` and :func:`gaps_flatten` to flatten the column once, not twice."""
    return lists_flatten(requests["chunk_times"], float)


def requests_derive(
    requests: pd.DataFrame,
    *,
    deadlines: Deadlines | None = None,
    chunk_times_flat: tuple[np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """Per-request derived metrics, one row per input row (same index).

    Adds: ``completed`` (bool), ``failed`` (bool), ``output_tokens`` (tokens, 0 when failed),
    ``ttft_s``, ``ttft_from_send_s``, ``e2e_s``, ``tpot_s``, ``queue_s``, ``itl_chunk_mean_s``
    (mean gap between visible chunks) in seconds, NaN where undefined (see module docstring); ``n_chunks``; ``met_deadline`` (bool).
    """
    out = requests.copy(deep=False)  # columns are added or replaced whole: the input stays as it was
    failed = _failed_mask(requests)
    completed = ~failed
    sched = requests["scheduled_s"].to_numpy(dtype=float)
    sent = requests["sent_s"].to_numpy(dtype=float)
    first = requests["first_token_s"].to_numpy(dtype=float)
    finish = requests["finish_s"].to_numpy(dtype=float)
    tokens = requests["num_output_tokens"].fillna(0).to_numpy(dtype=np.int64)

    with np.errstate(invalid="ignore", divide="ignore"):
        ttft = np.where(completed, first - sched, np.nan)
        ttft_send = np.where(completed, first - sent, np.nan)
        e2e = np.where(completed, finish - sched, np.nan)
        tpot = np.where(completed & (tokens >= 2), (e2e - ttft) / (tokens - 1), np.nan)

    if chunk_times_flat is not None:
        times, lens = chunk_times_flat
        starts = np.cumsum(lens) - lens
        nonempty = lens > 0
        firstc = np.full(lens.size, np.nan)
        last = np.full(lens.size, np.nan)
        firstc[nonempty] = times[starts[nonempty]]
        last[nonempty] = times[starts[nonempty] + lens[nonempty] - 1]
    else:
        # First and last chunk per request: a per-row lookup, cheaper than flattening every chunk.
        chunks = [x if isinstance(x, list | tuple | np.ndarray) else () for x in requests["chunk_times"]]
        lens = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
        firstc = np.array([x[0] if len(x) else np.nan for x in chunks], dtype=float)
        last = np.array([x[-1] if len(x) else np.nan for x in chunks], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        itl_mean = np.where(completed & (lens >= 2), (last - firstc) / (lens - 1), np.nan)

    e2e_limit = _deadline_limits(requests["traffic_class"], deadlines, "e2e_s")
    ttft_limit = _deadline_limits(requests["traffic_class"], deadlines, "ttft_s")
    ttft_for_deadline = np.where(np.isfinite(ttft), ttft, e2e)
    met = completed & (e2e <= e2e_limit) & (ttft_for_deadline <= ttft_limit)

    out["completed"] = completed
    out["failed"] = failed
    out["output_tokens"] = np.where(completed, tokens, 0)
    out["ttft_s"] = ttft
    out["ttft_from_send_s"] = ttft_send
    out["e2e_s"] = e2e
    out["tpot_s"] = tpot
    out["queue_s"] = requests["queue_s"].to_numpy(dtype=float)
    out["itl_chunk_mean_s"] = itl_mean
    out["n_chunks"] = lens
    out["met_deadline"] = met
    return out


def gaps_flatten(
    requests: pd.DataFrame, *, chunk_times_flat: tuple[np.ndarray, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Pooled inter-token gaps of completed requests (seconds).

    Returns ``{"chunk_gap_s", "chunk_row", "token_gap_s", "token_row"}``: per-chunk gaps and the
    positional row (0-based, in ``requests`` order) each belongs to; per-token gaps (see module
    docstring) and their rows. Rows are non-decreasing in every array. ``requests`` needs
    ``completed`` (from :func:`requests_derive`).
    """
    times, lens = chunk_times_flat if chunk_times_flat is not None else chunk_times_flatten(requests)
    ctoks, tlens = lists_flatten(requests["chunk_tokens"], np.int64)
    if not np.array_equal(lens, tlens):
        bad = requests["request_id"].to_numpy()[np.flatnonzero(lens != tlens)[:5]]
        raise ValueError(f"chunk_times and chunk_tokens differ in length for requests {list(bad)}")
    completed = requests["completed"].to_numpy(dtype=bool)
    # Work over every chunk in row order, so that each output array stays sorted by row: the
    # first chunk of a request has gap 0 and weighs its n0 - 1 extra tokens (they arrived with
    # the first token); a later chunk of n tokens after g seconds weighs n gaps of g / n.
    starts = np.cumsum(lens) - lens
    first = np.zeros(times.size, dtype=bool)
    first[starts[lens > 0]] = True
    gap_all = np.empty_like(times)
    if times.size:
        gap_all[1:] = np.diff(times)
        gap_all[first] = 0.0
    row_all = np.repeat(np.arange(lens.size, dtype=np.int64), lens)
    chunk_mask = ~first
    tokens = np.maximum(ctoks, 1)
    weight = np.where(first, np.maximum(ctoks - 1, 0), tokens)
    if not completed.all():
        done = completed[row_all]
        chunk_mask &= done
        weight = np.where(done, weight, 0)
    return {
        "chunk_gap_s": gap_all[chunk_mask],
        "chunk_row": row_all[chunk_mask],
        "token_gap_s": np.repeat(gap_all / tokens, weight),
        "token_row": np.repeat(row_all, weight),
    }


def summary_stats(values: np.ndarray) -> dict[str, float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {s: float("nan") for s in STATS}
    qs = np.percentile(values, PERCENTILES)
    out = {f"p{p}": float(q) for p, q in zip(PERCENTILES, qs, strict=True)}
    out["mean"] = float(values.mean())
    return out


def group_codes(frame: pd.DataFrame, by: Sequence[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """Dense group code per row of ``frame`` for the columns ``by`` and the groups' keys (one row
    per code, sorted by the key values; missing values form their own group, last)."""
    if not by:
        return np.zeros(len(frame), dtype=np.int64), pd.DataFrame(index=[0])
    combined = np.zeros(len(frame), dtype=np.int64)
    uniques = []
    for col in by:
        codes, values = pd.factorize(frame[col], sort=True, use_na_sentinel=True)
        codes = np.where(codes < 0, len(values), codes)
        uniques.append(np.concatenate([np.asarray(values, dtype=object), np.array([None], dtype=object)]))
        combined = combined * (len(values) + 1) + codes
    present, inverse = np.unique(combined, return_inverse=True)
    keys = {}
    rest = present
    for col, values in zip(reversed(list(by)), reversed(uniques), strict=True):
        keys[col] = values[rest % len(values)]
        rest = rest // len(values)
    return inverse.astype(np.int64), pd.DataFrame({c: keys[c] for c in by})


def request_success(derived: pd.DataFrame) -> np.ndarray:
    """Success per request: completed, within its class deadlines, valid output where a quality
    check applies (``output_valid``; missing column = valid) and correct where gradable
    (``correct``, ``console.analysis.grading``; NA or missing = not gradable, no effect)."""
    valid = derived["output_valid"].to_numpy(dtype=bool) if "output_valid" in derived else True
    right = (derived["correct"].astype("boolean") != False).fillna(True).to_numpy(dtype=bool) if "correct" in derived else True  # noqa: E712
    return derived["completed"].to_numpy(dtype=bool) & derived["met_deadline"].to_numpy(dtype=bool) & valid & right
