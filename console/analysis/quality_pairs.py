"""Quality equivalence against the baseline: exact token match, the first divergences, complete
paired counts with an exact McNemar test, per-slice rates and the list of regressions. The checks
themselves are :mod:`console.analysis.quality`.

Pure functions; no Django. Column contract as in ``console.analysis.metrics``.

Rules
-----
- **Pairing**: a candidate row is compared with the baseline row of the same ``load``,
  ``request_id`` and ``repeat``. No counterpart: NA.
- **Exact match**: ``output_token_ids`` equal when both rows have token ids, else the output
  texts equal (never true by default). ``first_divergence`` is the first 0-based token index
  where the ids differ (or the shorter length when one is a prefix of the other). Pairs where a
  request failed are not compared. Exact match is a quality criterion only under greedy decoding.
- **Counts and tests**: :func:`quality_counts` gives complete per-arm, per-task, per-check counts
  (requests checked, valid in each arm, regressions, improvements), an exact McNemar test on the
  discordant pairs, and the baseline's own flip rate between repeats.
- **Regression**: a check that passed for the baseline row and failed for the paired candidate row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from console.analysis.metrics import group_codes, lists_flatten
from console.analysis.quality import CHECKS, request_failed

PAIR_KEYS: tuple[str, ...] = ("load", "request_id", "repeat")


def _output_identity(tokens: Any, text: Any) -> tuple:
    """A hashable value equal for two outputs exactly when :func:`_output_key` is."""
    kind, value = _output_key(tokens, text)
    return (kind, tuple(np.asarray(value).tolist())) if kind == "tokens" else (kind, value)


def _output_key(tokens: Any, text: Any) -> tuple[str, Any]:
    """``("tokens", ids)`` when there are token ids (a list or an array), else ``("text", text)``."""
    if tokens is not None and len(tokens):
        return "tokens", tokens
    return "text", "" if text is None else str(text)


def exact_match(requests: pd.DataFrame, *, baseline_arm: str) -> pd.DataFrame:
    """Exact match of each row against its baseline counterpart (same index as ``requests``):
    ``exact_match`` (nullable boolean), ``first_divergence`` (nullable int, 0-based token index;
    NA when equal or compared as text) and ``exact_match_basis`` ("tokens" or "text").

    Token ids are compared when both rows have them, else the output texts: two different texts
    never match because neither arm returned ids. NA for baseline rows, rows without a
    counterpart, and pairs where either request failed (no output to compare)."""
    failed = request_failed(requests)
    keep = [*PAIR_KEYS, "output_token_ids", "output_text"]
    base_mask = (requests["arm"] == baseline_arm).to_numpy()
    base = requests.loc[base_mask, keep].assign(_failed=failed[base_mask]).drop_duplicates(list(PAIR_KEYS))
    index = pd.MultiIndex.from_frame(base[list(PAIR_KEYS)])
    match = np.full(len(requests), None, dtype=object)
    first = np.full(len(requests), None, dtype=object)
    basis = np.full(len(requests), None, dtype=object)
    keys = pd.MultiIndex.from_frame(requests[list(PAIR_KEYS)])
    pos = index.get_indexer(keys) if len(index) else np.full(len(requests), -1)
    texts = requests["output_text"].to_numpy()
    base_texts = base["output_text"].to_numpy()
    base_failed = base["_failed"].to_numpy(dtype=bool)
    rows = np.flatnonzero(~base_mask & (pos >= 0))
    rows = rows[~failed[rows] & ~base_failed[pos[rows]]]
    # Token ids of every row flattened once; each pair compared on its common prefix at once.
    flat, lens = lists_flatten(requests["output_token_ids"], np.int64)
    offsets = np.cumsum(lens) - lens
    base_rows = np.flatnonzero(base_mask)[~requests.loc[base_mask, list(PAIR_KEYS)].duplicated().to_numpy()]
    cand, counter = rows, base_rows[pos[rows]]
    by_tokens = (lens[cand] > 0) & (lens[counter] > 0)
    ci, bi = cand[by_tokens], counter[by_tokens]
    n = np.minimum(lens[ci], lens[bi])
    pair = np.repeat(np.arange(ci.size), n)
    within = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    differs = np.flatnonzero(flat[np.repeat(offsets[ci], n) + within] != flat[np.repeat(offsets[bi], n) + within])
    divergence = np.where(lens[ci] == lens[bi], -1, n)  # -1: equal
    hit, first_hit = np.unique(pair[differs], return_index=True)
    divergence[hit] = within[differs[first_hit]]
    match[ci] = divergence < 0
    first[ci] = [None if d < 0 else int(d) for d in divergence.tolist()]
    basis[ci] = "tokens"
    for i in cand[~by_tokens].tolist():
        j = pos[i]
        match[i] = str(texts[i] or "") == str(base_texts[j] or "")
        basis[i] = "text"
    return pd.DataFrame(
        {
            "exact_match": pd.array(match, dtype="boolean"),
            "first_divergence": pd.array(first, dtype="Int64"),
            "exact_match_basis": basis,
        },
        index=requests.index,
    )


DIVERGENCE_CONTEXT_CHARS = 40  # of the common text before the divergence
DIVERGENCE_CONTINUATION_CHARS = 120  # of each arm's text from the divergence on


def _text_split(base: str, cand: str) -> tuple[str, str, str]:
    """(context before the first differing character, baseline continuation, candidate
    continuation), cut to the lengths above."""
    n = min(len(base), len(cand))
    common = next((i for i in range(n) if base[i] != cand[i]), n)
    context = base[max(0, common - DIVERGENCE_CONTEXT_CHARS) : common]
    return (
        context,
        base[common : common + DIVERGENCE_CONTINUATION_CHARS],
        cand[common : common + DIVERGENCE_CONTINUATION_CHARS],
    )


def first_divergences(requests: pd.DataFrame, *, baseline_arm: str, limit: int = 200) -> pd.DataFrame:
    """Where each candidate output first leaves its baseline's (same load, request and repeat):
    one row per pair whose ``exact_match`` is false (``requests`` carries the columns of
    :func:`exact_match`), earliest divergence first, at most ``limit`` rows.

    Columns: ``arm``, ``load``, ``request_id``, ``repeat``, ``task``, ``position`` (0-based token
    index of the first differing token; None when compared as text), ``context`` (the common text
    just before the first differing character), ``baseline_text`` and ``candidate_text`` (each
    arm's text from there on), and ``baseline_result_id``/``candidate_result_id`` when the input
    has ``result_id``. The text split is by character: the analysis has no tokenizer, so the
    continuations start at the first differing character, which lies in the differing token."""
    columns = ["arm", "load", "request_id", "repeat", "task", "position", "context", "baseline_text", "candidate_text"]
    has_ids = "result_id" in requests
    if has_ids:
        columns += ["baseline_result_id", "candidate_result_id"]
    diverged = requests[(requests["arm"] != baseline_arm) & requests["exact_match"].eq(False).fillna(False).to_numpy(bool)]
    if diverged.empty:
        return pd.DataFrame(columns=columns)
    keep = [*PAIR_KEYS, "output_text"] + (["result_id"] if has_ids else [])
    base = requests.loc[requests["arm"] == baseline_arm, keep].drop_duplicates(list(PAIR_KEYS))
    pairs = diverged.merge(base, on=list(PAIR_KEYS), how="inner", suffixes=("", "_base"))
    pairs = pairs.assign(_pos=pairs["first_divergence"].astype("Float64").fillna(np.inf))
    pairs = pairs.sort_values(["_pos", "arm", "load", "request_id", "repeat"], kind="stable").head(limit)
    rows = []
    for r in pairs.itertuples(index=False):
        context, base_text, cand_text = _text_split(str(r.output_text_base or ""), str(r.output_text or ""))
        pos = r.first_divergence
        row = {
            "arm": r.arm,
            "load": r.load,
            "request_id": r.request_id,
            "repeat": r.repeat,
            "task": r.task,
            "position": None if pd.isna(pos) else int(pos),
            "context": context,
            "baseline_text": base_text,
            "candidate_text": cand_text,
        }
        if has_ids:
            row |= {"baseline_result_id": r.result_id_base, "candidate_result_id": r.result_id}
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


QUALITY_COUNT_CHECKS: tuple[str, ...] = (*CHECKS, "exact_match")


def _mcnemar_p(regressions: int, improvements: int) -> float | None:
    n = regressions + improvements
    if n == 0:
        return None
    return float(binomtest(regressions, n, 0.5).pvalue)


def _baseline_flips(base: pd.DataFrame, check: str) -> pd.DataFrame:
    """Per (load, task): requests with >= 2 baseline repeats where ``check`` applies, and how many
    of them disagree between repeats (validity for the checks; the output for exact_match)."""
    if check == "exact_match":
        key = [
            _output_identity(t, x) if not f else None
            for t, x, f in zip(base["output_token_ids"], base["output_text"], base["_failed"], strict=True)
        ]
        frame = base[["load", "task", "request_id"]].assign(v=key)
    else:
        frame = base[["load", "task", "request_id"]].assign(v=base[check].astype("boolean").astype(object))
    frame = frame[frame["v"].notna()]
    grouped = frame.groupby(["load", "task", "request_id"], sort=False)["v"]
    per_request = pd.DataFrame({"n": grouped.size(), "distinct": grouped.nunique()}).reset_index()
    per_request = per_request[per_request["n"] >= 2]
    return (
        per_request.assign(flipped=per_request["distinct"] > 1)
        .groupby(["load", "task"], sort=False)
        .agg(n_multi=("flipped", "size"), n_flipped=("flipped", "sum"))
        .reset_index()
    )


def quality_counts(
    flags: pd.DataFrame, *, baseline_arm: str, checks: Sequence[str] = QUALITY_COUNT_CHECKS
) -> pd.DataFrame:
    """Complete paired quality counts per candidate arm x load x task x check (never truncated).

    ``flags`` holds the input columns plus :func:`quality_flags`'s and :func:`exact_match`'s.
    Columns: ``arm``, ``load``, ``task``, ``check``, ``n_applicable`` (paired requests where the
    check applies in both arms; for exact_match: pairs compared), ``base_valid``, ``cand_valid``,
    ``regressions`` (baseline valid, candidate not; exact_match: outputs differ),
    ``improvements`` (candidate valid, baseline not; 0 for exact_match), ``mcnemar_p`` (exact
    two-sided McNemar test on the discordant pairs; None when there are none or for
    exact_match) and ``baseline_flip_rate`` (share of requests with two or more baseline repeats
    whose repeats disagree on this check: the baseline's own noise; None with one repeat).
    ``checks`` limits the counts to some of ``QUALITY_COUNT_CHECKS``."""
    columns = ["arm", "load", "task", "check", "n_applicable", "base_valid", "cand_valid"]
    columns += ["regressions", "improvements", "mcnemar_p", "baseline_flip_rate"]
    failed = request_failed(flags)
    is_base = (flags["arm"] == baseline_arm).to_numpy()
    base = flags.loc[is_base].assign(_failed=failed[is_base])
    cand = flags.loc[~is_base]
    rows: list[dict[str, Any]] = []
    base_keys = base[[*PAIR_KEYS, *CHECKS]].drop_duplicates(list(PAIR_KEYS))
    merged = cand[["arm", *PAIR_KEYS, "task", *CHECKS, "exact_match"]].merge(
        base_keys, on=list(PAIR_KEYS), suffixes=("_cand", "_base")
    )
    flips = {check: _baseline_flips(base, check) for check in checks}
    for (arm, load, task), g in merged.groupby(["arm", "load", "task"], sort=True):
        for check in checks:
            if check == "exact_match":
                em = g["exact_match"].astype("boolean")
                applies = em.notna().to_numpy()
                if not applies.any():
                    continue
                n = int(applies.sum())
                same = int(em.fillna(False).to_numpy(dtype=bool).sum())
                counts = {"base_valid": n, "cand_valid": same, "regressions": n - same, "improvements": 0}
                p = None
            else:
                b = g[f"{check}_base"].astype("boolean")
                c = g[f"{check}_cand"].astype("boolean")
                applies = (b.notna() & c.notna()).to_numpy(dtype=bool)
                if not applies.any():
                    continue
                bv = b.fillna(False).to_numpy(dtype=bool)[applies]
                cv = c.fillna(False).to_numpy(dtype=bool)[applies]
                n = int(applies.sum())
                counts = {
                    "base_valid": int(bv.sum()),
                    "cand_valid": int(cv.sum()),
                    "regressions": int((bv & ~cv).sum()),
                    "improvements": int((~bv & cv).sum()),
                }
                p = _mcnemar_p(counts["regressions"], counts["improvements"])
            f = flips[check]
            hit = f[(f["load"] == load) & (f["task"] == task)]
            flip = (
                float(hit["n_flipped"].iloc[0]) / float(hit["n_multi"].iloc[0])
                if len(hit) and int(hit["n_multi"].iloc[0]) > 0
                else None
            )
            rows.append(
                {"arm": arm, "load": load, "task": task, "check": check, "n_applicable": n}
                | counts
                | {"mcnemar_p": p, "baseline_flip_rate": flip}
            )
    return pd.DataFrame(rows, columns=columns)


def quality_rates(flags: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """Rates per group over the rows where each check applies. ``flags`` holds ``by`` columns plus
    the columns of :func:`quality_flags` and :func:`exact_match`.

    Columns: keys, ``n_requests``, and per check in ``CHECKS`` + ``exact_match``: ``n_<check>``
    (rows where it applies) and ``<check>_rate`` (fraction passing, NaN when none apply);
    ``output_valid_rate``.
    """
    codes, out = group_codes(flags, by)
    n = len(out)
    out["n_requests"] = np.bincount(codes, minlength=n).astype(np.int64)
    for c in (*CHECKS, "exact_match"):
        if c in flags:
            col = flags[c].astype("boolean")
            applies = col.notna().to_numpy()
            passed = col.fillna(False).to_numpy(dtype=bool)
        else:
            applies = passed = np.zeros(len(flags), dtype=bool)
        n_c = np.bincount(codes, weights=applies, minlength=n)
        out[f"n_{c}"] = n_c.astype(np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"{c}_rate"] = np.where(
                n_c > 0, np.bincount(codes, weights=passed, minlength=n) / n_c, np.nan
            )
    valid = flags["output_valid"].to_numpy(dtype=float)
    out["output_valid_rate"] = np.bincount(codes, weights=valid, minlength=n) / out["n_requests"].to_numpy()
    return out


def quality_regressions(flags: pd.DataFrame, *, baseline_arm: str) -> pd.DataFrame:
    """Candidate rows that fail a check their paired baseline row passed: one row per request.

    ``flags`` holds the input columns plus :func:`quality_flags`'s. Columns: ``arm``, ``load``,
    ``request_id``, ``repeat``, ``task``, ``traffic_class``, ``checks`` (the regressed checks,
    comma-separated, in ``CHECKS`` order), ``baseline_run_id``, ``candidate_run_id``,
    ``baseline_result_id``/``candidate_result_id`` (when the input has ``result_id``), ``reason``
    (the candidate's first failing check).
    """
    id_cols = ["run_id"] + (["result_id"] if "result_id" in flags else [])
    base = flags.loc[flags["arm"] == baseline_arm, [*PAIR_KEYS, *id_cols, *CHECKS]].drop_duplicates(
        list(PAIR_KEYS)
    )
    cand = flags.loc[
        flags["arm"] != baseline_arm,
        ["arm", *PAIR_KEYS, "task", "traffic_class", *id_cols, *CHECKS, "quality_reason"],
    ]
    merged = cand.merge(base, on=list(PAIR_KEYS), suffixes=("_cand", "_base"))
    hits = {
        c: ((merged[f"{c}_base"] == True) & (merged[f"{c}_cand"] == False)).fillna(False).to_numpy(dtype=bool)  # noqa: E712
        for c in CHECKS
    }
    any_hit = np.logical_or.reduce(list(hits.values())) if len(merged) else np.zeros(0, dtype=bool)
    out = merged.loc[any_hit].copy()
    out["checks"] = [",".join(c for c in CHECKS if hits[c][i]) for i in np.flatnonzero(any_hit)]
    out = out.rename(
        columns={
            "run_id_base": "baseline_run_id",
            "run_id_cand": "candidate_run_id",
            "result_id_base": "baseline_result_id",
            "result_id_cand": "candidate_result_id",
            "quality_reason": "reason",
        }
    )
    columns = ["arm", *PAIR_KEYS, "task", "traffic_class", "checks", "baseline_run_id", "candidate_run_id"]
    if "result_id" in flags:
        columns += ["baseline_result_id", "candidate_result_id"]
    columns.append("reason")
    return out[columns].sort_values(["arm", "load", "request_id", "repeat"]).reset_index(drop=True)
