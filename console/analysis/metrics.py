"""Per-request latency metrics, aggregates, speculation (acceptance) tables, resources and cost.

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
mean_util`` (fraction or percent, passed through), ``energy_j`` (NaN when unmeasured),
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
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from console.analysis.slices import OUTPUT_POSITION_EDGES, bucket_labels

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


def _flatten(column: pd.Series, dtype: type) -> tuple[np.ndarray, np.ndarray]:
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
    return _flatten(requests["chunk_times"], float)


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
    ctoks, tlens = _flatten(requests["chunk_tokens"], np.int64)
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


def _quantiles(values: np.ndarray) -> dict[str, float]:
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


def _group_order(codes: np.ndarray) -> np.ndarray | slice:
    """Positions that sort ``codes`` (stable); a plain slice when they are already sorted."""
    if codes.size == 0 or np.all(codes[1:] >= codes[:-1]):
        return slice(None)
    small = codes.astype(np.int16) if codes.max() < np.iinfo(np.int16).max else codes
    return np.argsort(small, kind="stable")  # radix sort for 16-bit keys


def metrics_aggregate(
    derived: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    by: Sequence[str],
    gaps: Mapping[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """One row per group of ``by`` (columns of ``derived``), e.g. ``["run_id"]``,
    ``["arm", "load"]`` or ``["arm", "load", "task"]``.

    Columns: the group keys; ``n_requests``, ``n_completed``, ``n_failed``, ``n_met_deadline``,
    ``n_runs``, ``wall_s`` (Σ over the group's runs), ``output_tokens``; ``{metric}_{stat}`` for
    every metric in ``REQUEST_METRICS`` (seconds) and stat in ``STATS``; when ``gaps`` (from
    :func:`gaps_flatten` over the same ``derived``) is given, the pooled ``itl_chunk_s_*`` and
    ``itl_token_s_*`` too; ``completed_rps``, ``goodput_rps`` (requests/s),
    ``output_tokens_per_s`` (tokens/s), ``deadline_attainment`` (fraction).
    """
    codes, keys = group_codes(derived, by)
    order = _group_order(codes)
    bounds = np.searchsorted(codes[order], np.arange(len(keys) + 1))
    row_bounds = bounds  # when ``order`` is a slice, group g is rows bounds[g] to bounds[g + 1]
    columns = {m: derived[m].to_numpy(dtype=float)[order] for m in REQUEST_METRICS}
    gap_sets: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if gaps is not None:
        for name, vkey, rkey in (
            ("itl_chunk_s", "chunk_gap_s", "chunk_row"),
            ("itl_token_s", "token_gap_s", "token_row"),
        ):
            if isinstance(order, slice):
                # Groups are contiguous row ranges and gap rows are sorted: no gather needed.
                gap_sets[name] = (gaps[vkey], np.searchsorted(gaps[rkey], row_bounds))
                continue
            gcodes = codes[gaps[rkey]]
            gorder = _group_order(gcodes)
            gbounds = np.searchsorted(gcodes[gorder], np.arange(len(keys) + 1))
            gap_sets[name] = (gaps[vkey][gorder], gbounds)
    rows = []
    for g in range(len(keys)):
        sel = slice(bounds[g], bounds[g + 1])
        row: dict[str, float] = {}
        for m, values in columns.items():
            for stat, v in _quantiles(values[sel]).items():
                row[f"{m}_{stat}"] = v
        for name, (values, gb) in gap_sets.items():
            for stat, v in _quantiles(values[gb[g] : gb[g + 1]]).items():
                row[f"{name}_{stat}"] = v
        rows.append(row)
    out = pd.concat([keys, pd.DataFrame(rows, index=keys.index)], axis=1)

    n_groups = len(keys)
    out["n_requests"] = np.bincount(codes, minlength=n_groups).astype(np.int64)
    for col, src in (
        ("n_completed", "completed"),
        ("n_met_deadline", "met_deadline"),
        ("output_tokens", "output_tokens"),
    ):
        weights = derived[src].to_numpy(dtype=float)
        out[col] = np.rint(np.bincount(codes, weights=weights, minlength=n_groups)).astype(np.int64)
    run_groups = pd.DataFrame({"_g": codes, "run_id": derived["run_id"].to_numpy()}).drop_duplicates()
    run_groups["wall_s"] = run_groups["run_id"].map(runs.set_index("run_id")["wall_s"].astype(float))
    out["n_runs"] = np.bincount(run_groups["_g"].to_numpy(), minlength=n_groups).astype(np.int64)
    wall = run_groups.groupby("_g")["wall_s"].sum(min_count=1).reindex(np.arange(n_groups))
    out["n_failed"] = out["n_requests"] - out["n_completed"]
    out["wall_s"] = wall.to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["completed_rps"] = out["n_completed"] / out["wall_s"]
        out["goodput_rps"] = out["n_met_deadline"] / out["wall_s"]
        out["output_tokens_per_s"] = out["output_tokens"] / out["wall_s"]
        out["deadline_attainment"] = out["n_met_deadline"] / out["n_requests"]
    return out


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
    step, see module docstring) and ``position_bucket_idx`` (index into ``OUTPUT_POSITION_EDGES``;
    labels from ``slices.bucket_labels``).

    Raises ValueError when a request's ``drafted`` and ``accepted`` lists differ in length or a
    step accepts more than it drafted.
    """
    drafted, dlens = _flatten(requests["drafted"], np.int64)
    accepted, alens = _flatten(requests["accepted"], np.int64)
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


# What accelerator-hours are measured on (stored in the comparison as ``cost_basis``): the busy
# time of each run, see the module docstring. A capacity search may add "capacity".
COST_BASIS = "busy_time"


def busy_seconds(requests: pd.DataFrame) -> pd.Series:
    """Busy time per run (seconds, indexed by ``run_id``): the length of the union of the
    intervals [``sent_s``, end] of the run's requests, end = ``finish_s`` (or ``first_token_s``
    where no finish time was stored). Overlapping requests count once, gaps with nothing in flight
    not at all; a request never sent, or with no end, or ending before it was sent, adds nothing.
    A failed request counts until it ended: the engine worked on it until then. A run whose
    requests add nothing has 0.0."""
    sent = requests["sent_s"].to_numpy(dtype=float)
    end = np.fmax(requests["finish_s"].to_numpy(dtype=float), requests["first_token_s"].to_numpy(dtype=float))
    run_ids = requests["run_id"].to_numpy()
    keep = np.isfinite(sent) & np.isfinite(end) & (end > sent)
    out = pd.Series(0.0, index=pd.Index(pd.unique(run_ids), name="run_id"), dtype=float)
    if not keep.any():
        return out
    frame = pd.DataFrame({"run_id": run_ids[keep], "start": sent[keep], "end": end[keep]})
    frame = frame.sort_values(["run_id", "start"], kind="stable")
    # A new busy period starts where a request begins after every earlier one of its run ended.
    reach = frame.groupby("run_id", sort=False)["end"].cummax()
    prev_reach = reach.groupby(frame["run_id"], sort=False).shift()
    period = (~(frame["start"] <= prev_reach)).cumsum()
    spans = frame.groupby(period).agg(run_id=("run_id", "first"), start=("start", "min"), end=("end", "max"))
    totals = (spans["end"] - spans["start"]).groupby(spans["run_id"]).sum()
    out.loc[totals.index] = totals.to_numpy(dtype=float)
    return out


def run_costs(
    runs: pd.DataFrame,
    derived: pd.DataFrame,
    *,
    cost_per_hour_usd: float,
    power_price_usd_per_kwh: float | None = None,
) -> pd.DataFrame:
    """Resources and cost per run (one row per row of ``runs``).

    ``derived`` needs ``sent_s``, ``first_token_s``, ``finish_s``, ``completed``,
    ``met_deadline``, ``output_tokens`` and optionally ``output_valid`` (missing = valid). Adds
    ``busy_s`` (s, :func:`busy_seconds`; 0 for a run without requests), ``accelerator_hours``
    (h, on busy time, never ``wall_s``: see the module docstring), ``energy_kwh``, ``cost_usd``
    (USD), ``energy_cost_included`` (bool), ``successes``, ``output_tokens``, ``n_requests``.
    """
    out = runs.copy()
    count = out["accelerator_count"].fillna(1) if "accelerator_count" in out else 1
    out["busy_s"] = out["run_id"].map(busy_seconds(derived)).fillna(0.0).astype(float)
    out["accelerator_hours"] = out["busy_s"] / 3600.0 * count
    energy = out["energy_j"].astype(float) if "energy_j" in out else pd.Series(np.nan, index=out.index)
    out["energy_kwh"] = energy / 3.6e6
    out["cost_usd"] = out["accelerator_hours"] * float(cost_per_hour_usd)
    use_energy = np.isfinite(energy.to_numpy()) & (power_price_usd_per_kwh is not None)
    out["energy_cost_included"] = use_energy
    if power_price_usd_per_kwh is not None:
        out.loc[use_energy, "cost_usd"] += out.loc[use_energy, "energy_kwh"] * float(power_price_usd_per_kwh)
    success = request_success(derived)
    per_run = pd.DataFrame(
        {"run_id": derived["run_id"], "success": success, "output_tokens": derived["output_tokens"]}
    ).groupby("run_id")
    out["successes"] = out["run_id"].map(per_run["success"].sum()).fillna(0).astype(np.int64)
    out["output_tokens"] = out["run_id"].map(per_run["output_tokens"].sum()).fillna(0).astype(np.int64)
    out["n_requests"] = out["run_id"].map(per_run.size()).fillna(0).astype(np.int64)
    return out


def class_goodput(derived: pd.DataFrame, runs: pd.DataFrame, *, base_arm: str) -> np.ndarray:
    """Per request, its share of its traffic class's goodput (requests/s): ``met_deadline`` x the
    class's requests in the request's run / the **baseline's** ``wall_s`` at the same load and
    repeat. Its mean over a class's requests in one run is that class's goodput over the
    baseline's run time, so a paired difference says how many more of the class's requests per
    second met their deadline, with the offered load and the duration held fixed: the bootstrap
    that resamples requests varies which requests met it. A candidate whose last request merely
    finishes earlier (a shorter run, the same requests on time) is not credited with goodput.
    NaN where the baseline has no wall time at that load and repeat."""
    base_runs = runs[runs["arm"] == base_arm]
    base_wall = base_runs.groupby(["load", "repeat"])["wall_s"].sum(min_count=1).astype(float)
    keys = pd.MultiIndex.from_frame(derived[["load", "repeat"]])
    wall = base_wall.reindex(keys).to_numpy(dtype=float)
    n_class = derived.groupby(["run_id", "traffic_class"], sort=False)["run_id"].transform("size").to_numpy(float)
    met = derived["met_deadline"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = met * n_class / wall
    out[~(wall > 0)] = np.nan
    return out


def request_success(derived: pd.DataFrame) -> np.ndarray:
    """Success per request: completed, within its class deadlines, valid output where a quality
    check applies (``output_valid``; missing column = valid) and correct where gradable
    (``correct``, ``console.analysis.grading``; NA or missing = not gradable, no effect)."""
    valid = derived["output_valid"].to_numpy(dtype=bool) if "output_valid" in derived else True
    right = (derived["correct"].astype("boolean") != False).fillna(True).to_numpy(dtype=bool) if "correct" in derived else True  # noqa: E712
    return derived["completed"].to_numpy(dtype=bool) & derived["met_deadline"].to_numpy(dtype=bool) & valid & right


def cost_per_success(cost_usd: float, successes: int, output_tokens: int) -> dict[str, float | str | None]:
    """``cost_per_success_usd`` (USD per successful request) and
    ``cost_per_million_output_tokens_usd``; inf with a ``*_reason`` when the denominator is 0."""
    out: dict[str, float | str | None] = {
        "cost_usd": float(cost_usd),
        "successes": int(successes),
        "output_tokens": int(output_tokens),
    }
    if successes > 0:
        out["cost_per_success_usd"] = float(cost_usd) / successes
        out["cost_per_success_reason"] = None
    else:
        out["cost_per_success_usd"] = float("inf")
        out["cost_per_success_reason"] = "no successful requests"
    if output_tokens > 0:
        out["cost_per_million_output_tokens_usd"] = float(cost_usd) / output_tokens * 1e6
        out["cost_per_million_output_tokens_reason"] = None
    else:
        out["cost_per_million_output_tokens_usd"] = float("inf")
        out["cost_per_million_output_tokens_reason"] = "no output tokens"
    return out


# Run-level spec-decode counters (deltas over a run, vLLM's names as the openai engine stores
# them, see workers/engines/openai_http.py and docs/engines.md for other servers' mapping).
SERVER_DRAFTS = "spec_decode_num_drafts"
SERVER_DRAFT_TOKENS = "spec_decode_num_draft_tokens"
SERVER_ACCEPTED = "spec_decode_num_accepted_tokens"
SERVER_ACCEPTED_PER_POS = "spec_decode_num_accepted_tokens_per_pos"


def server_counters_sum(counters: Sequence[Mapping | None]) -> dict[str, object] | None:
    """The spec-decode counter deltas of several runs summed: ``drafts``, ``drafted``,
    ``accepted`` (tokens) and ``accepted_per_pos`` (list, position 0 first). None when any run
    lacks the three totals (a server without spec-decode counters, or a page it could not
    read): a partial sum would read as less drafting than happened."""
    out: dict[str, object] = {"drafts": 0, "drafted": 0, "accepted": 0, "accepted_per_pos": []}
    per_pos: list[int] = []
    if not counters:
        return None
    for c in counters:
        if not isinstance(c, Mapping) or not all(
            isinstance(c.get(k), int | float) for k in (SERVER_DRAFTS, SERVER_DRAFT_TOKENS, SERVER_ACCEPTED)
        ):
            return None
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


def session_columns(requests: pd.DataFrame) -> pd.DataFrame:
    """``requests`` with ``session_id`` (its own ``request_id`` where missing or empty) and ``turn``
    (0 where missing): frames from before sessions, and single-turn traces, are sessions of one."""
    out = requests.copy(deep=False)  # columns are added or replaced whole: the input stays as it was
    if "session_id" not in out:
        out["session_id"] = out["request_id"]
    else:
        empty = out["session_id"].isna() | (out["session_id"].astype(str) == "")
        out["session_id"] = out["session_id"].where(~empty, out["request_id"])
    out["turn"] = pd.to_numeric(out["turn"], errors="coerce").fillna(0).astype(np.int64) if "turn" in out else 0
    return out


def sessions_aggregate(derived: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """Per group of ``by`` (e.g. ``["arm", "load"]``): ``n_sessions``, ``n_multi_turn``, ``turns_mean``,
    ``n_sessions_completed`` (every turn completed), ``session_completed_share`` (fraction) and
    ``session_duration_s_{stat}`` over completed sessions (seconds; see the module docstring).

    ``derived`` is :func:`requests_derive` output with ``session_id`` and ``turn``
    (:func:`session_columns`); a session is keyed per run (``run_id``), so repeats never merge.
    """
    frame = session_columns(derived)
    keys = [*by, "run_id", "session_id"]
    grouped = frame.groupby(keys, sort=True, dropna=False)
    per = grouped.agg(
        turns=("turn", "size"),
        start_s=("scheduled_s", "min"),
        end_s=("finish_s", "max"),
        all_completed=("completed", "all"),
    ).reset_index()
    per["duration_s"] = np.where(per["all_completed"], per["end_s"] - per["start_s"], np.nan)
    rows = []
    for group, part in per.groupby(list(by), sort=True, dropna=False):
        values = group if isinstance(group, tuple) else (group,)
        row: dict[str, object] = dict(zip(by, values, strict=True))
        row["n_sessions"] = len(part)
        row["n_multi_turn"] = int((part["turns"] > 1).sum())
        row["turns_mean"] = float(part["turns"].mean())
        completed = int(part["all_completed"].sum())
        row["n_sessions_completed"] = completed
        row["session_completed_share"] = completed / len(part)
        for stat, v in _quantiles(part["duration_s"].to_numpy(dtype=float)).items():
            row[f"session_duration_s_{stat}"] = v
        rows.append(row)
    return pd.DataFrame(rows)


def turns_aggregate(derived: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """Per group of ``by`` and ``turn``: ``n_requests``, ``n_completed`` and ``ttft_s_{stat}``,
    ``e2e_s_{stat}`` (seconds) over completed requests: how latency grows with the context."""
    frame = session_columns(derived)
    rows = []
    for group, part in frame.groupby([*by, "turn"], sort=True, dropna=False):
        row: dict[str, object] = dict(zip([*by, "turn"], group, strict=True))
        row["n_requests"] = len(part)
        row["n_completed"] = int(part["completed"].sum())
        for metric in ("ttft_s", "e2e_s"):
            for stat, v in _quantiles(part[metric].to_numpy(dtype=float)).items():
                row[f"{metric}_{stat}"] = v
        rows.append(row)
    return pd.DataFrame(rows)
