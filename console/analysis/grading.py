"""Graded correctness: is the answer right, where the trace carries a reference?

Pure functions plus the code sandbox (:mod:`console.analysis.sandbox`); no Django. Grading runs
in the worker's comparison computation, never in a page request.

What is gradable (a request's ``metadata``, as the prompt-set parsers store it)
-----------------------------------------------------------------------------
- **math**: ``reference_answer`` (GSM8K stores the text after ``####``). The answer's final number
  is compared with the reference's, exactly (as fractions). The final number is the first number
  after the last ``####`` when there is one, else the last number inside the last ``\\boxed{...}``, else after the
  last "answer is", else in the whole text. Numbers: optional sign, thousands commas
  (``1,234``), decimals (``2.50``; a trailing sentence period is not a decimal point), simple
  fractions (``3/4``); ``$`` and ``%`` around them are ignored.
- **code**: ``test`` and ``entry_point`` (HumanEval). The program is the prompt (when the request
  has one: the signature and docstring) followed by the answer's code (the fenced block that
  defines ``entry_point``, else the first fenced block, else the raw text), then the tests and
  ``check(entry_point)``, run in the sandbox. Correct iff the tests pass within the timeout.
- **tool_call**: ``reference_tool_calls`` (a list of ``{"name", "arguments"}``: the calls must
  match as a multiset, arguments compared as JSON values) or ``ground_truth`` in BFCL's
  possible-answer form (``[{name: {arg: [acceptable values]}}]``; ``""`` among the values marks
  an optional argument; no other arguments allowed).
- **json**: ``reference_json`` (the parsed output must equal it). Schema validity stays a
  quality check, as before.

Anything else is **not gradable** (``correct`` NA), never "correct". A failed request is wrong
where it is gradable. Each distinct (reference, output) is graded once: a bounded in-process
cache keyed by their hash, so repeats and arms that agree cost nothing, and a recomputation in
the same worker reuses earlier sandbox runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import norm

from console.analysis.quality import json_parse, request_failed, tool_calls_parse
from console.analysis.quality_pairs import quality_counts
from console.analysis.sandbox import new_marker, run_python
from console.jsonutil import canonical_json

KINDS: tuple[str, ...] = ("math", "code", "tool_call", "json")
CODE_TIMEOUT_S = 5.0
CACHE_SIZE = 20_000

_NUMBER = re.compile(
    r"(?<![\w.])[-−]?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?(?![\d])"
)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)", re.IGNORECASE)
_CODE_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def parse_number(text: str) -> Fraction | None:
    """One number token as an exact fraction (commas, ``$`` and a unary minus removed)."""
    token = text.replace(",", "").replace("$", "").replace("−", "-").replace(" ", "")
    try:
        if "/" in token:
            num, den = token.split("/", 1)
            return Fraction(num) / Fraction(den) if Fraction(den) != 0 else None
        return Fraction(token)
    except (ValueError, ZeroDivisionError):
        return None


def final_number(text: str | None) -> Fraction | None:
    """The answer's final number (module docstring), or None when it states none."""
    if not text:
        return None
    segment = text
    if "####" in text:
        marked = _NUMBER.findall(text.rsplit("####", 1)[1])
        if marked:
            return parse_number(marked[0])
    if boxed := _BOXED.findall(text):
        segment = boxed[-1]
    else:
        hits = list(_ANSWER_IS.finditer(text))
        if hits and _NUMBER.search(text, hits[-1].end()):
            segment = text[hits[-1].end() :]
    numbers = _NUMBER.findall(segment)
    if not numbers and segment is not text:
        numbers = _NUMBER.findall(text)
    return parse_number(numbers[-1]) if numbers else None


def grade_math(text: str | None, reference: str) -> tuple[bool | None, str | None]:
    expected = final_number(str(reference))
    if expected is None:
        return None, f"reference answer {str(reference)[:40]!r} has no number"
    got = final_number(text)
    if got is None:
        return False, "no number in the answer"
    return (True, None) if got == expected else (False, f"answer {float(got):g}, expected {float(expected):g}")


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The code in an answer: the fenced block defining ``entry_point``, else the first Python (or
    untagged) fenced block, else the raw text."""
    blocks = [(lang.lower(), body) for lang, body in _CODE_FENCE.findall(text or "")]
    if not blocks:
        return text or ""
    if entry_point:
        for _, body in blocks:
            if re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", body):
                return body
    for lang, body in blocks:
        if lang in ("", "python", "py", "python3"):
            return body
    return blocks[0][1]


def code_program(text: str | None, *, test: str, entry_point: str, prompt: str | None, marker: str) -> str:
    """The program the sandbox runs: prompt + answer code, the tests, ``check``, the marker."""
    code = extract_code(text or "", entry_point)
    head = prompt or ""
    if head and not head.endswith("\n"):
        head += "\n"
    if head and re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        head += "\n"  # a complete function after the prompt's: it replaces the stub
    return f"{head}{code}\n\n{test}\n\ncheck({entry_point})\nprint({marker!r})\n"


def grade_code(
    text: str | None, *, test: str, entry_point: str, prompt: str | None, timeout_s: float = CODE_TIMEOUT_S
) -> tuple[bool | None, str | None]:
    if not str(entry_point).isidentifier():
        return None, f"entry_point {str(entry_point)[:40]!r} is not a Python name"
    marker = new_marker()
    program = code_program(text, test=test, entry_point=entry_point, prompt=prompt, marker=marker)
    result = run_python(program, timeout_s=timeout_s, marker=marker)
    return result.passed, result.reason


def _canonical(value: Any) -> str:
    # NaN allowed and non-ASCII escaped (json.dumps's defaults), not the stored form: a model's tool
    # arguments may hold NaN (Python's parser accepts it) and this text is only compared and hashed
    # in memory; its bytes stay those of the cache keys it always made.
    return canonical_json(value, ensure_ascii=True, allow_nan=True)


def _call_arguments(call: Mapping[str, Any]) -> Any:
    args = call.get("arguments", call.get("parameters", {}))
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return None
    return args


def _same_value(got: Any, want: Any) -> bool:
    if isinstance(got, bool) or isinstance(want, bool):
        return got is want or got == want and type(got) is type(want)
    if isinstance(got, int | float) and isinstance(want, int | float):
        return math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=0.0)
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(_same_value(a, b) for a, b in zip(got, want, strict=True))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(_same_value(got[k], want[k]) for k in got)
    return bool(got == want)


def _bfcl_match(call: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    """One call against one BFCL possible answer ``{name: {arg: [acceptable values]}}``."""
    (name, allowed), *_ = expected.items()
    args = _call_arguments(call)
    if call.get("name") != name or not isinstance(args, dict) or not isinstance(allowed, dict):
        return False
    if set(args) - set(allowed):
        return False
    for arg, values in allowed.items():
        values = values if isinstance(values, list) else [values]
        if arg not in args:
            if "" not in values:
                return False
        elif not any(_same_value(args[arg], v) for v in values if v != ""):
            return False
    return True


def grade_tool_calls(text: str | None, reference: Mapping[str, Any]) -> tuple[bool | None, str | None]:
    """Calls in the answer against ``reference_tool_calls`` or BFCL ``ground_truth`` (unordered)."""
    calls = [c for c in (tool_calls_parse(text) or []) if isinstance(c, dict)]
    if not calls:
        return False, "no tool call in the answer"
    if "reference_tool_calls" in reference:
        wanted = reference["reference_tool_calls"]
        wanted = wanted if isinstance(wanted, list) else [wanted]
        got = sorted(_canonical([c.get("name"), _call_arguments(c)]) for c in calls)
        exp = sorted(_canonical([w.get("name"), _call_arguments(w)]) for w in wanted if isinstance(w, dict))
        return (True, None) if got == exp else (False, "tool calls differ from the reference")
    truth = [t for t in reference["ground_truth"] if isinstance(t, dict) and len(t) == 1]
    if len(calls) != len(truth):
        return False, f"{len(calls)} tool calls, expected {len(truth)}"
    remaining = list(truth)
    for call in calls:
        hit = next((t for t in remaining if _bfcl_match(call, t)), None)
        if hit is None:
            return False, f"call {call.get('name')!r} matches no expected call"
        remaining.remove(hit)
    return True, None


def grade_json(text: str | None, expected: Any) -> tuple[bool | None, str | None]:
    ok, value = json_parse(text)
    if not ok:
        return False, "output is not valid JSON"
    return (True, None) if _same_value(value, expected) else (False, "JSON differs from the reference")


def reference_of(metadata: Mapping[str, Any] | None, *, prompt: str | None = None) -> dict[str, Any] | None:
    """The grading reference a request's metadata carries (``{"kind", ...}``), or None."""
    meta = metadata if isinstance(metadata, Mapping) else {}
    if isinstance(meta.get("test"), str) and isinstance(meta.get("entry_point"), str):
        return {"kind": "code", "test": meta["test"], "entry_point": meta["entry_point"], "prompt": prompt}
    if isinstance(meta.get("reference_answer"), str | int | float) and not isinstance(meta.get("reference_answer"), bool):
        return {"kind": "math", "reference_answer": str(meta["reference_answer"])}
    calls = meta.get("reference_tool_calls")
    calls = [calls] if isinstance(calls, dict) else calls
    if isinstance(calls, list) and calls and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
        return {"kind": "tool_call", "reference_tool_calls": calls}
    truth = meta.get("ground_truth")
    if (
        isinstance(truth, list)
        and truth
        and all(isinstance(t, dict) and len(t) == 1 and isinstance(next(iter(t.values())), dict) for t in truth)
    ):
        return {"kind": "tool_call", "ground_truth": truth}
    if "reference_json" in meta:
        return {"kind": "json", "reference_json": meta["reference_json"]}
    return None


_CACHE: OrderedDict[str, tuple[bool | None, str | None]] = OrderedDict()


def grade(text: str | None, reference: Mapping[str, Any]) -> tuple[bool | None, str | None]:
    """(correct, reason) of one output against one reference (:func:`reference_of`); correct is
    None when the reference itself is unusable. Cached by the hash of both."""
    key = hashlib.sha256(_canonical([dict(reference), text or ""]).encode()).hexdigest()
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    kind = reference.get("kind")
    if kind == "math":
        result = grade_math(text, reference["reference_answer"])
    elif kind == "code":
        result = grade_code(
            text, test=reference["test"], entry_point=reference["entry_point"], prompt=reference.get("prompt")
        )
    elif kind == "tool_call":
        result = grade_tool_calls(text, reference)
    elif kind == "json":
        result = grade_json(text, reference["reference_json"])
    else:
        result = (None, f"unknown reference kind {kind!r}")
    _CACHE[key] = result
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return result


def correctness_flags(requests: pd.DataFrame, references: Mapping[str, Mapping[str, Any] | None] | None) -> pd.DataFrame:
    """Per request (same index): ``gradable`` (bool), ``correct`` (nullable boolean; NA when not
    gradable), ``correct_reason`` and ``grade_kind``. ``references`` maps ``request_id`` to the
    reference (:func:`reference_of`); a ``reference`` column in ``requests`` works too."""
    n = len(requests)
    correct = np.full(n, None, dtype=object)
    reasons = np.full(n, None, dtype=object)
    kinds = np.full(n, None, dtype=object)
    if "reference" in requests:
        refs = requests["reference"].to_numpy()
    else:
        lookup = references or {}
        refs = np.array([lookup.get(str(r)) for r in requests["request_id"]], dtype=object)
    failed = request_failed(requests) if n else np.zeros(0, dtype=bool)
    texts = requests["output_text"].to_numpy() if "output_text" in requests else np.full(n, "")
    for i in range(n):
        ref = refs[i]
        if not isinstance(ref, Mapping):
            continue
        kinds[i] = ref.get("kind")
        if failed[i]:
            correct[i], reasons[i] = False, "request failed"
            continue
        correct[i], reasons[i] = grade(None if texts[i] is None else str(texts[i]), ref)
        if correct[i] is None:
            kinds[i] = None
    out = pd.DataFrame(
        {"correct": pd.array(correct, dtype="boolean"), "correct_reason": reasons, "grade_kind": kinds},
        index=requests.index,
    )
    out.insert(0, "gradable", out["correct"].notna().to_numpy())
    return out


def _wilson(k: float, n: float, *, ci: float) -> tuple[float, float]:
    z = float(norm.ppf(0.5 + ci / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def proportion_interval(
    correct: np.ndarray, gradable: np.ndarray, *, n_boot: int, seed: int, ci: float
) -> tuple[float, float, str]:
    """Interval of sum(correct) / sum(gradable) over requests (one entry per request, repeats
    summed into it): percentile bootstrap drawing requests; Wilson's score interval (requests
    as the n) when every request agrees, where the bootstrap collapses to a point."""
    k, n = correct.astype(float), gradable.astype(float)
    total_k, total_n = float(k.sum()), float(n.sum())
    rate = total_k / total_n
    per_request = np.divide(k, n, out=np.zeros_like(k), where=n > 0)
    if len(n) < 2 or np.all(per_request == per_request[0]):
        lo, hi = _wilson(rate * len(n), float(len(n)), ci=ci)
        return lo, hi, "wilson"
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(len(n), np.full(len(n), 1.0 / len(n)), size=n_boot)
    boot = (weights @ k) / np.maximum(weights @ n, 1e-12)
    alpha = (1 - ci) / 2
    return float(np.quantile(boot, alpha)), float(np.quantile(boot, 1 - alpha)), "bootstrap"


def correctness_rates(
    flags: pd.DataFrame, *, n_boot: int, seed: int = 0, ci: float = 0.95, by: Sequence[str] = ("arm", "load", "task")
) -> pd.DataFrame:
    """Per group: ``n_requests`` (distinct requests), ``gradable`` and ``correct`` (rows: each
    repeat counts), ``rate`` (correct / gradable), ``interval_lo``/``interval_hi`` and
    ``interval_method`` (request-clustered, :func:`proportion_interval`), and ``interval`` (the
    pair ``[lo, hi]``, as the API shows it). Only groups with at least one gradable row."""
    columns = [*by, "n_requests", "gradable", "correct", "rate", "interval_lo", "interval_hi", "interval_method"]
    columns.append("interval")
    graded = flags[flags["gradable"].to_numpy(dtype=bool)]
    rows = []
    for keys, g in graded.groupby(list(by), sort=True):
        per_request = (
            g.assign(_c=g["correct"].astype(bool).astype(int))
            .groupby("request_id", sort=False)
            .agg(k=("_c", "sum"), n=("_c", "size"))
        )
        k, n = per_request["k"].to_numpy(), per_request["n"].to_numpy()
        lo, hi, method = proportion_interval(k, n, n_boot=n_boot, seed=seed, ci=ci)
        key_values = keys if isinstance(keys, tuple) else (keys,)
        rows.append(
            [*key_values, len(per_request), int(n.sum()), int(k.sum()), float(k.sum() / n.sum()), lo, hi, method, [lo, hi]]
        )
    return pd.DataFrame(rows, columns=columns)


def correctness_counts(flags: pd.DataFrame, *, baseline_arm: str) -> pd.DataFrame:
    """Paired counts per candidate arm x load x task, in the shape of quality counts with
    ``check`` = ``"correct"``: a regression is baseline right, candidate wrong on the same
    (load, request, repeat); McNemar's exact test on the discordant pairs; the baseline's flip
    rate between its own repeats."""
    frame = flags.copy(deep=False)  # columns are replaced whole: ``flags`` stays as it was
    # quality_counts reads CHECKS columns; present "correct" as the only applicable check.
    frame["json_valid"] = frame["correct"]
    for col in ("schema_valid", "tool_valid"):
        frame[col] = pd.array([None] * len(frame), dtype="boolean")
    frame["exact_match"] = pd.array([None] * len(frame), dtype="boolean")
    counts = quality_counts(frame, baseline_arm=baseline_arm, checks=("json_valid",))
    counts = counts[counts["check"] == "json_valid"].copy()
    counts["check"] = "correct"
    return counts.reset_index(drop=True)


def correctness_regressions(flags: pd.DataFrame, *, baseline_arm: str) -> pd.DataFrame:
    """Candidate rows graded wrong whose paired baseline row was right: ``arm``, ``load``,
    ``request_id``, ``repeat``, ``task``, ``reason`` (the candidate's grading reason)."""
    keys = ["load", "request_id", "repeat"]
    base = flags.loc[flags["arm"] == baseline_arm, [*keys, "correct"]].drop_duplicates(keys)
    cand = flags.loc[flags["arm"] != baseline_arm, ["arm", *keys, "task", "correct", "correct_reason"]]
    merged = cand.merge(base, on=keys, suffixes=("", "_base"))
    hit = ((merged["correct_base"] == True) & (merged["correct"] == False)).fillna(False).to_numpy(dtype=bool)  # noqa: E712
    out = merged.loc[hit, ["arm", *keys, "task", "correct_reason"]].rename(columns={"correct_reason": "reason"})
    return out.sort_values(["arm", "load", "request_id", "repeat"]).reset_index(drop=True)
