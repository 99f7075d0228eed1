"""The fit assessment's two proposer conditions (docs/fit.md): whether a compatible proposer exists
for the engine and target, and whether the drafter's acceptance is high enough to pay for what
drafting costs. Pure functions over plain data; no Django. :mod:`console.analysis.fit_assessment`
calls them.

Break-even (per-token i.i.d. acceptance ``alpha``, draft length ``k``): a verification yields
``(1 - alpha^(k+1)) / (1 - alpha)`` tokens on average and costs ``k*c + 1`` target steps, ``c``
being one drafter step's cost relative to one target step; speculation pays when the tokens per
target pass exceed ``k*c + 1``. ``c`` is measured from the runs where they allow it (the
candidate's seconds per target pass / the baseline's seconds per token, less one, per drafted
token), which also absorbs a verification of k + 1 tokens costing more than one decode step under
load; else estimated (n-gram and suffix: 0; a draft model: its weight bytes / the target's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console import numbers as fmt
from console.analysis.fit_conditions import LIKELY, TITLES, UNKNOWN, UNLIKELY
from console.analysis.fit_stats import PER_REQUEST_SOURCE

HEAD_METHODS = {"eagle", "eagle3", "mtp", "medusa"}
# Proposers that need no model: they exist whatever the target (suffix decoding is vLLM's).
LOOKUP_METHODS = ("ngram", "suffix")
SUFFIX_ENGINES = frozenset({"vllm", "openai"})
SUITS = {
    "ngram": "outputs that copy from the prompt (code edits, RAG, summarisation)",
    "suffix": "repetitive agentic loops and outputs that repeat earlier outputs",
    "model": "general text, where one exists for the target",
}
BISECTION_STEPS = 60  # halvings of [0, 1] for the break-even acceptance: far below any shown digit


def _tokens(value: float | None) -> str:
    return fmt.number(value, "tokens")


def _condition(name: str, verdict: str, numbers: dict[str, Any], reason: str) -> dict[str, Any]:
    return {"name": name, "title": TITLES[name], "verdict": verdict, "numbers": numbers, "reason": reason}


def _lookup_proposers(engine: str, configured: set[str]) -> list[dict[str, Any]]:
    suffix = engine in SUFFIX_ENGINES
    return [
        {
            "proposer": "ngram",
            "kind": "n-gram (prompt lookup)",
            "source": "always available",
            "configured": "ngram" in configured,
            "note": "needs no model",
            "suits": SUITS["ngram"],
        },
        {
            "proposer": "suffix",
            "kind": "suffix decoding",
            "source": "always available" if suffix else "not on this engine (vLLM's, or a vLLM server's)",
            "configured": "suffix" in configured,
            "note": "needs no model" if suffix else "",
            "suits": SUITS["suffix"],
        },
    ]


def _model_proposers(
    engine: str, target: str, specs: list[dict], catalog: Mapping[str, Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], bool, bool]:
    """Catalog drafts of the target's tokenizer family (hf), the configured drafts and heads;
    whether one shares the target's tokenizer; whether a configured draft's tokenizer is unknown."""
    family = (catalog.get(target) or {}).get("family")
    target_size = (catalog.get(target) or {}).get("size_bytes") or 0
    drafts = {s.get("model") for s in specs if s.get("method") == "draft_model" and s.get("model")}
    out: list[dict[str, Any]] = []
    same = unknown = False
    if engine == "hf" and family:
        for name, entry in catalog.items():
            smaller = (entry.get("size_bytes") or 0) < target_size
            if name != target and entry.get("family") == family and name not in drafts and smaller:
                same = True
                out.append(
                    {"proposer": name, "kind": "draft model (same tokenizer)", "source": "model catalog"}
                )
                out[-1] |= {"configured": False, "note": "", "suits": SUITS["model"]}
    for model in sorted(str(m) for m in drafts):
        draft_family = (catalog.get(model) or {}).get("family")
        if family and draft_family == family:
            same = True
            kind, note = "draft model (same tokenizer)", ""
        elif family and draft_family:
            kind = "draft model (cross-vocabulary)"
            note = (
                "greedy-only on the hf engine (universal assisted generation)"
                if engine == "hf"
                else "needs the engine's heterogeneous-vocabulary support"
            )
        else:
            unknown = True
            kind, note = "draft model", "tokenizer not known to the catalog: check it matches the target's"
        out.append(
            {"proposer": model, "kind": kind, "source": "configured", "configured": True, "note": note}
        )
        out[-1]["suits"] = SUITS["model"]
    for method in sorted({str(s.get("method")) for s in specs} & HEAD_METHODS):
        same = True
        out.append(
            {"proposer": method, "kind": f"{method.upper()} head", "source": "configured", "configured": True}
        )
        out[-1] |= {"note": "trained for the target", "suits": SUITS["model"]}
    return out, same, unknown


def proposer_condition(
    engine: str, target: str, specs: list[dict], catalog: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Likely with a same-tokenizer draft or head (general text), or with n-gram or suffix decoding
    as a candidate (they need no model, so they exist whatever the target); else unknown, never
    unlikely: n-gram always exists, and whether it suits the workload shows in its acceptance."""
    family = (catalog.get(target) or {}).get("family")
    models, same, unknown = _model_proposers(engine, target, specs, catalog)
    lookups = _lookup_proposers(engine, {str(s.get("method")) for s in specs})
    numbers = {
        "engine": engine,
        "target": target,
        "tokenizer_family": family,
        "proposers": [*lookups, *models],
    }
    available = [p for p in lookups if p["source"] == "always available"]
    chosen = [p for p in available if p["configured"]]
    kinds = " and ".join(p["kind"] for p in available)
    be = "is" if len(available) == 1 else "are"
    if same:
        names = ", ".join(
            p["proposer"] for p in models if "cross" not in p["kind"] and p["kind"] != "draft model"
        )
        reason = f"same-tokenizer proposer(s) for general text: {names}; {kinds} {be} available too, whatever the target"
        return _condition("proposer", LIKELY, numbers, reason)
    if chosen:
        suits = "; ".join(f"{p['kind']} suits {p['suits']}" for p in chosen)
        reason = (
            f"{' and '.join(p['kind'] for p in chosen)} needs no model, so it exists whatever the target, and is a "
            f"candidate here: {suits}; whether this workload is like that shows in its acceptance (the drafter "
            "acceptance condition)"
        )
        return _condition("proposer", LIKELY, numbers, reason)
    fallback = (
        f"{kinds} {be} available whatever the target, for outputs that copy the prompt or repeat earlier ones"
    )
    if family is None or unknown:
        reason = f"the model catalog does not know the tokenizer of {target}, so no same-tokenizer draft can be named; {fallback}"
        return _condition("proposer", UNKNOWN, numbers, reason)
    reason = (
        f"no same-tokenizer draft model or EAGLE/MTP head for general text; {fallback}: add one as a candidate "
        "to measure whether it fits"
    )
    return _condition("proposer", UNKNOWN, numbers, reason)


def tokens_per_verification(alpha: float, k: float) -> float:
    """Expected tokens one verification yields with draft length ``k`` and per-token acceptance
    ``alpha`` (i.i.d.): ``(1 - alpha^(k+1)) / (1 - alpha)``; ``k + 1`` at ``alpha`` = 1."""
    if alpha >= 1:
        return k + 1
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def break_even_alpha(needed: float, k: float) -> float | None:
    """The acceptance rate at which a verification yields ``needed`` tokens (0 when one token
    does), or None when even all ``k`` accepted (``k + 1`` tokens) do not."""
    if needed <= 1:
        return 0.0
    if needed >= k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tokens_per_verification(mid, k) < needed else (lo, mid)
    return (lo + hi) / 2


def _drafter_cost(
    fact: Mapping[str, Any], k: float | None, target: str, catalog: Mapping
) -> tuple[float | None, str]:
    """``c``, one drafter step's cost in target steps, and where it came from."""
    tpp, tpot, base = fact.get("tokens_per_pass"), fact.get("tpot_s"), fact.get("baseline_tpot_s")
    if k and fact.get("tokens_per_pass_source") == PER_REQUEST_SOURCE and tpp and tpot and base:
        per_pass = tpot * tpp / base  # the candidate's seconds per target pass, in baseline tokens
        return max(
            per_pass - 1, 0.0
        ) / k, "measured: the candidate's time per target pass / the baseline's per token"
    method = fact.get("method")
    if method in LOOKUP_METHODS:
        return 0.0, "estimated: no model, a lookup on the host"
    draft, whole = (catalog.get(fact.get("draft_model") or "") or {}), (catalog.get(target) or {})
    if method == "draft_model" and draft.get("size_bytes") and whole.get("size_bytes"):
        return draft["size_bytes"] / whole["size_bytes"], "estimated: the draft's weight bytes / the target's"
    return None, "not measured: no timing yet and no estimate for this proposer"


def drafter_row(
    fact: Mapping[str, Any], *, target: str, catalog: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """One candidate's break-even: its draft length ``k`` (tokens per draft, measured where it
    drafted, else as configured), ``c`` and its source, the tokens per target pass it needs
    (``k*c + 1``) and the acceptance that yields them (i.i.d.), against what it observed;
    ``pays`` None when either side is not measured."""
    drafted, drafts = fact.get("drafted"), fact.get("drafts")
    k = drafted / drafts if drafted and drafts else fact.get("k_configured")
    c, c_source = _drafter_cost(fact, k, target, catalog)
    needed = k * c + 1 if k and c is not None else None
    alpha, observed = fact.get("acceptance_rate"), fact.get("tokens_per_pass")
    return {
        "arm": fact.get("arm"),
        "load": fact.get("load"),
        "k": k,
        "c": c,
        "c_source": c_source,
        "needed_tokens_per_pass": needed,
        "alpha_needed": break_even_alpha(needed, k) if needed is not None and k else None,
        "alpha": alpha,
        "expected_tokens_per_pass": tokens_per_verification(alpha, k) if alpha is not None and k else None,
        "tokens_per_pass": observed,
        "tokens_per_pass_source": fact.get("tokens_per_pass_source"),
        "pays": None if observed is None or needed is None else observed > needed,
    }


def drafter_condition(
    facts: list[dict], *, target: str, catalog: Mapping[str, Mapping[str, Any]], heaviest: str | None
) -> dict[str, Any]:
    """Drafter acceptance high enough: each candidate at the heaviest load (else its last load)
    judged by :func:`drafter_row`. Likely when one pays, unlikely when every measured one does
    not, unknown ("not measured") when none has both its acceptance and its cost."""
    chosen: dict[Any, Mapping[str, Any]] = {}
    for fact in facts:  # each arm at the heaviest load, else at its last
        arm = fact.get("arm")
        if arm not in chosen or chosen[arm].get("load") != heaviest:
            chosen[arm] = fact
    rows = [drafter_row(f, target=target, catalog=catalog) for f in chosen.values()]
    numbers: dict[str, Any] = {"judged_at": heaviest, "candidates": rows}
    judged = [r for r in rows if r["pays"] is not None]
    if not rows:
        return _condition("drafter_acceptance", UNKNOWN, numbers, "not measured: no speculative candidate")
    if not judged:
        ran = any(f.get("load") is not None for f in facts)
        why = (
            "no candidate has both its acceptance and its cost"
            if ran
            else "no comparison of the candidates yet"
        )
        needs = [f"{r['arm']} needs more than {_tokens(r['needed_tokens_per_pass'])}" for r in rows]
        needs = [n for n, r in zip(needs, rows, strict=True) if r["needed_tokens_per_pass"] is not None]
        said = f" ({', '.join(needs)} per target pass)" if needs else ""
        return _condition("drafter_acceptance", UNKNOWN, numbers, f"not measured: {why}{said}")
    best = max(judged, key=lambda r: r["tokens_per_pass"] - r["needed_tokens_per_pass"])
    said = (
        f"{best['arm']} at {best['load']}: {_tokens(best['tokens_per_pass'])} per target pass, needs more than "
        f"{_tokens(best['needed_tokens_per_pass'])} (k {fmt.number(best['k'])} × c {fmt.number(best['c'])} + 1)"
    )
    if best["pays"]:
        return _condition("drafter_acceptance", LIKELY, numbers, said)
    return _condition(
        "drafter_acceptance", UNLIKELY, numbers, f"no candidate pays for its drafting; the closest, {said}"
    )
