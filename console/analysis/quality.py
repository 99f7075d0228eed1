"""Quality equivalence: exact token match against the baseline, JSON / JSON-Schema validity,
tool-call validity, per-slice rates and the list of regressions.

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
- **JSON** applies to requests whose ``response_format`` has type ``json_schema`` or
  ``json_object``. A Markdown fence wrapping the whole output (```` ```json ... ``` ```` or
  ```` ``` ... ``` ````, after stripping whitespace) is removed before parsing, because chat models
  often add one and clients routinely strip it; any other text around the JSON makes it invalid.
  ``json_schema``: schema-valid iff it validates against ``json_schema.schema``. ``json_object``:
  schema-valid iff the value is a JSON object.
- **Tool call** applies to requests with non-empty ``tools``. The output must parse as one or more
  calls: ``{"name": ..., "arguments": {...}}`` (arguments may also be a JSON-encoded string, as
  the OpenAI API sends them), ``{"type": "function", "function": {...}}``, ``{"tool_calls": [...]}``,
  a list of these, or one or more Qwen-style ``<tool_call>{...}</tool_call>`` blocks (text outside
  the blocks is allowed). Every call must name a defined tool (``tools`` entries in OpenAI form
  ``{"type": "function", "function": {"name", "parameters"}}`` or bare ``{"name", "parameters"}``)
  and its arguments must validate against that tool's ``parameters`` schema (none = any object).
- Checks are memoised per (output text, ``request_id``): a request's ``response_format`` and
  ``tools`` come from the trace and are the same in every arm.
- **Failed requests** fail every check that applies to them (the user got no valid output).
- ``output_valid``: every applicable check passed (True when none applies). Exact match is not
  part of it: under sampling, outputs legitimately differ.
- **Regression**: a check that passed for the baseline row and failed for the paired candidate row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import jsonschema
import numpy as np
import pandas as pd

from console.analysis.metrics import lists_flatten

CHECKS: tuple[str, ...] = ("json_valid", "schema_valid", "tool_valid")
PAIR_KEYS: tuple[str, ...] = ("load", "request_id", "repeat")

_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\n(?P<body>.*?)\n?```\Z", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(?P<body>.*?)</tool_call>", re.DOTALL)


def json_fence_strip(text: str) -> str:
    """Remove a Markdown code fence that wraps the whole (whitespace-stripped) text."""
    stripped = text.strip()
    match = _FENCE.match(stripped)
    return match.group("body").strip() if match else stripped


def json_parse(text: str | None) -> tuple[bool, Any]:
    """(parsed, value) for ``text`` after :func:`json_fence_strip`."""
    if not text:
        return False, None
    try:
        return True, json.loads(json_fence_strip(text))
    except (ValueError, RecursionError):
        return False, None


@lru_cache(maxsize=1024)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_validate(value: Any, schema: dict) -> tuple[bool, str | None]:
    """(valid, first error message) of ``value`` against a JSON Schema. Raises
    ``jsonschema.SchemaError`` when the schema itself is invalid."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    if validator.is_valid(value):
        return True, None
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    return False, None if error is None else error.message


def response_format_check(text: str | None, response_format: dict | None) -> dict[str, Any]:
    """JSON checks for one output. Returns ``{"json_valid", "schema_valid", "reason"}`` with
    ``None`` for checks that do not apply (no or non-JSON response_format, or an invalid schema:
    the trace's fault, not the output's; the reason says so)."""
    kind = (response_format or {}).get("type")
    if kind not in ("json_schema", "json_object"):
        return {"json_valid": None, "schema_valid": None, "reason": None}
    ok, value = json_parse(text)
    if not ok:
        return {"json_valid": False, "schema_valid": False, "reason": "output is not valid JSON"}
    if kind == "json_object":
        is_obj = isinstance(value, dict)
        return {"json_valid": True, "schema_valid": is_obj, "reason": None if is_obj else "not a JSON object"}
    schema = ((response_format or {}).get("json_schema") or {}).get("schema")
    if schema is None:
        return {"json_valid": True, "schema_valid": None, "reason": "response_format has no schema"}
    try:
        valid, message = schema_validate(value, schema)
    except jsonschema.SchemaError as exc:
        return {"json_valid": True, "schema_valid": None, "reason": f"invalid schema in trace: {exc.message}"}
    return {"json_valid": True, "schema_valid": valid, "reason": None if valid else f"schema: {message}"}


def _tool_specs(tools: Sequence[dict]) -> dict[str, dict]:
    specs = {}
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(fn, dict) and fn.get("name"):
            specs[fn["name"]] = fn.get("parameters") or {"type": "object"}
    return specs


def _calls_from_value(value: Any) -> list[Any] | None:
    if isinstance(value, list):
        calls: list[Any] = []
        for item in value:
            inner = _calls_from_value(item)
            if inner is None:
                return None
            calls.extend(inner)
        return calls
    if isinstance(value, dict):
        if isinstance(value.get("tool_calls"), list):
            return _calls_from_value(value["tool_calls"])
        if isinstance(value.get("function"), dict):
            return [value["function"]]
        if "name" in value:
            return [value]
    return None


def tool_calls_parse(text: str | None) -> list[dict] | None:
    """The tool calls in ``text`` (see module docstring), or None when it does not parse as any."""
    if not text:
        return None
    blocks = _TOOL_CALL.findall(text)
    if blocks:
        calls: list[Any] = []
        for block in blocks:
            ok, value = json_parse(block)
            inner = _calls_from_value(value) if ok else None
            if inner is None:
                return None
            calls.extend(inner)
        return calls
    ok, value = json_parse(text)
    return _calls_from_value(value) if ok else None


def tool_call_check(text: str | None, tools: Sequence[dict] | None) -> dict[str, Any]:
    """Tool-call validity of one output: ``{"tool_valid", "reason"}``; None when no tools."""
    if not tools:
        return {"tool_valid": None, "reason": None}
    calls = tool_calls_parse(text)
    if not calls:
        return {"tool_valid": False, "reason": "output is not a tool call"}
    specs = _tool_specs(tools)
    for call in calls:
        name = call.get("name") if isinstance(call, dict) else None
        if name not in specs:
            return {"tool_valid": False, "reason": f"unknown tool {name!r}"}
        args = call.get("arguments", call.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return {"tool_valid": False, "reason": f"arguments of {name!r} are not JSON"}
        if not isinstance(args, dict):
            return {"tool_valid": False, "reason": f"arguments of {name!r} are not an object"}
        try:
            valid, message = schema_validate(args, specs[name])
        except jsonschema.SchemaError as exc:
            return {"tool_valid": None, "reason": f"invalid parameters schema in trace: {exc.message}"}
        if not valid:
            return {"tool_valid": False, "reason": f"arguments of {name!r}: {message}"}
    return {"tool_valid": True, "reason": None}


def _failed(requests: pd.DataFrame) -> np.ndarray:
    if "completed" in requests:
        return ~requests["completed"].to_numpy(dtype=bool)
    error = requests["error"].fillna("").astype(str).str.len().to_numpy() > 0
    return (
        error
        | ~np.isfinite(requests["finish_s"].to_numpy(dtype=float))
        | requests["finish_reason"].isna().to_numpy()
    )


# Flags a worker may have stored at write time, by check (``tool_call_valid`` is the model's name).
STORED_COLUMNS: dict[str, tuple[str, ...]] = {
    "json_valid": ("json_valid",),
    "schema_valid": ("schema_valid",),
    "tool_valid": ("tool_valid", "tool_call_valid"),
}


def _stored_flags(requests: pd.DataFrame) -> dict[str, np.ndarray] | None:
    found = {}
    for check, names in STORED_COLUMNS.items():
        name = next((c for c in names if c in requests), None)
        if name is None:
            return None
        found[check] = requests[name].astype("boolean").to_numpy(dtype=object, na_value=None)
    return found


def quality_flags(requests: pd.DataFrame, *, use_stored: bool = True) -> pd.DataFrame:
    """Validity per request (same index as ``requests``): ``json_valid``, ``schema_valid``,
    ``tool_valid`` (pandas nullable boolean, NA where the check does not apply), ``output_valid``
    (bool) and ``quality_reason`` (str or None, the first failing check's reason).

    When ``requests`` already carries the three flags (``STORED_COLUMNS``, as the worker stores
    them with each result) and ``use_stored`` is true, they are used as they are and only the
    failing rows are re-checked, for their reasons: validating every output again is the
    slowest part of a comparison. Failed requests fail their applicable checks either way.
    """
    failed = _failed(requests)
    n = len(requests)
    texts = requests["output_text"].to_numpy()
    formats = requests["response_format"].to_numpy() if "response_format" in requests else np.full(n, None)
    tools = requests["tools"].to_numpy() if "tools" in requests else np.full(n, None)
    stored = _stored_flags(requests) if use_stored else None
    if stored is not None:
        return _flags_from_stored(
            stored, failed=failed, texts=texts, formats=formats, tools=tools, index=requests.index
        )
    results = {c: np.full(n, None, dtype=object) for c in CHECKS}
    reasons = np.full(n, None, dtype=object)
    # Arms often return the same text for the same request: check each (text, request) once.
    # A request's response_format and tools come from the trace, the same in every arm.
    ids = requests["request_id"].to_numpy() if "request_id" in requests else np.arange(n)
    cache: dict[tuple[str, object], dict[str, Any]] = {}
    for i in np.flatnonzero([bool(f) for f in formats]):
        key = (str(texts[i]), ids[i])
        if key not in cache:
            cache[key] = response_format_check(texts[i], formats[i])
        res = cache[key]
        if res["json_valid"] is not None and failed[i]:
            res = {"json_valid": False, "schema_valid": False, "reason": "request failed"}
        results["json_valid"][i] = res["json_valid"]
        results["schema_valid"][i] = res["schema_valid"]
        reasons[i] = res["reason"]
    tool_cache: dict[tuple[str, object], dict[str, Any]] = {}
    for i in np.flatnonzero([isinstance(t, list | tuple | np.ndarray) and len(t) > 0 for t in tools]):
        key = (str(texts[i]), ids[i])
        if key not in tool_cache:
            tool_cache[key] = tool_call_check(texts[i], list(tools[i]))
        res = tool_cache[key]
        if res["tool_valid"] is not None and failed[i]:
            res = {"tool_valid": False, "reason": "request failed"}
        results["tool_valid"][i] = res["tool_valid"]
        if reasons[i] is None:
            reasons[i] = res["reason"]
    return _flags_frame(results, reasons, requests.index)


def _flags_frame(results: dict[str, np.ndarray], reasons: np.ndarray, index: pd.Index) -> pd.DataFrame:
    out = pd.DataFrame({c: pd.array(results[c], dtype="boolean") for c in CHECKS}, index=index)
    out["output_valid"] = ~(out[list(CHECKS)] == False).any(axis=1).to_numpy()  # noqa: E712
    out["quality_reason"] = reasons
    return out


def _flags_from_stored(
    stored: dict[str, np.ndarray],
    *,
    failed: np.ndarray,
    texts: np.ndarray,
    formats: np.ndarray,
    tools: np.ndarray,
    index: pd.Index,
) -> pd.DataFrame:
    results = {c: stored[c].copy() for c in CHECKS}
    reasons = np.full(len(failed), None, dtype=object)
    for c in CHECKS:
        applies = np.array([v is not None for v in results[c]], dtype=bool)
        results[c][applies & failed] = False
    for i in np.flatnonzero(failed):
        if any(results[c][i] is False for c in CHECKS):
            reasons[i] = "request failed"
    for i in np.flatnonzero(~failed):
        if results["json_valid"][i] is False or results["schema_valid"][i] is False:
            reasons[i] = response_format_check(texts[i], formats[i])["reason"] or "stored flag: invalid"
        elif results["tool_valid"][i] is False:
            tl = tools[i]
            reasons[i] = (tool_call_check(texts[i], list(tl) if tl is not None else None)["reason"]) or (
                "stored flag: invalid"
            )
    return _flags_frame(results, reasons, index)


def _divergence(a: Any, b: Any) -> int | None:
    """The first token index where two id sequences (lists or arrays) differ; None if equal."""
    arr_a = np.asarray(a if a is not None else [], dtype=np.int64)
    arr_b = np.asarray(b if b is not None else [], dtype=np.int64)
    n = min(arr_a.size, arr_b.size)
    diff = np.flatnonzero(arr_a[:n] != arr_b[:n])
    if diff.size:
        return int(diff[0])
    return None if arr_a.size == arr_b.size else n


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
    failed = _failed(requests)
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
    from scipy.stats import binomtest

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
    failed = _failed(flags)
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
    from console.analysis.metrics import group_codes

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
