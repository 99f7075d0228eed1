"""Is a speculation row's evidence what its arm's config says: the checks behind the
``no_evidence`` and ``config_mismatch`` flags of :func:`.speculation.speculation_rows`.

What counts as evidence that an arm drafted: per-request verification steps (the ``hf`` and
``vllm`` engines; ``vllm serve --per-request-spec-decode-metrics``), or the server's spec-decode
counter deltas over the run (its ``/metrics``). A speculative arm with neither is ``no_evidence``:
whatever it measured cannot be credited to speculative decoding, and the gate does not measure
the criteria that would.

The draft length k (``num_speculative_tokens``), from the drafts themselves:

- **more than k in one step** (per-step lists: the largest number of tokens one step drafted),
  **more than k tokens per draft on average** (drafted / drafts, per-request totals or server
  counters), or **more draft positions than k** (the server's per-position acceptance counter has
  one entry per position it drafts at): impossible with k, so a mismatch. Not for transformers'
  ``draft_length_schedule`` "heuristic", which grows the draft past k by design.
- **no step ever drafted k** over at least :data:`MIN_STEPS_FOR_K` drafting steps (per-step
  lists only): a method proposes fewer than k now and then (n-gram when the match or the
  prompt's continuation is short, any method at the length limit), never on every one of that
  many steps. Not for ``draft_length_schedule`` "dynamic" (the draft stops when its confidence
  drops) nor for vLLM's ``suffix`` (a tree of variable depth).
- fewer tokens per draft than k on average is **not** evidence: see the line above.

The method: a row labelled not to speculate (the baseline) that drafted is a mismatch (the
server speculates whatever the arm says). The method's name cannot be checked: no supported
server reports it in its counters, and a draft model and n-gram draft alike. An arm whose server
exports no spec-decode counters while another arm's does is said so in its ``no_evidence``
reason (the likeliest cause: its server runs without speculation), not failed: a page the
worker could not read looks the same.

Pure Python; no Django.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

NO_EVIDENCE = "no drafting evidence"
CONFIG_MISMATCH = "config mismatch"
# Drafting steps after which "no step drafted k" is evidence of another k (see the docstring).
MIN_STEPS_FOR_K = 100
HOW_TO_MEASURE = (
    "record per-request steps (the hf or vllm engine, or vllm serve --per-request-spec-decode-metrics) "
    "or run against a server whose /metrics has spec-decode counters"
)
VARIABLE_LENGTH_METHODS = frozenset({"suffix"})


def no_evidence_reason(*, arm: str, load: str, arms_with_counters: Collection[str]) -> str:
    """Why a speculative arm at one load has no acceptance evidence, and how to get it."""
    others = sorted(a for a in arms_with_counters if a != arm)
    hint = (
        f"; {', '.join(others)}'s server reported spec-decode counters and {arm}'s did not: "
        "its server likely runs without speculative decoding"
        if others
        else ""
    )
    return (
        f"{NO_EVIDENCE}: {arm} is configured to speculate, but at load {load} no request recorded "
        f"verification steps and its server reported no spec-decode counters{hint}; {HOW_TO_MEASURE}"
    )


def config_mismatch_reason(
    *,
    arm: str,
    load: str,
    config: Mapping[str, Any] | None,
    speculative: bool | None,
    evidence: Mapping[str, Any],
) -> str | None:
    """Why the drafts of ``arm`` at ``load`` contradict its speculative ``config`` (vLLM's keys;
    None: the baseline), or None. ``evidence``: ``source`` (None: nothing to check), ``drafts``,
    ``drafted`` (tokens), ``max_drafted`` (most tokens one step drafted; None without per-step
    lists), ``n_draft_steps`` (steps that drafted), ``positions`` (the server's per-position
    entries; None without them)."""
    drafts, drafted = evidence.get("drafts"), evidence.get("drafted")
    if evidence.get("source") is None or not drafts:
        return None
    if speculative is False:
        return (
            f"{CONFIG_MISMATCH}: {arm} is configured not to speculate, yet its {evidence['source']} evidence at "
            f"load {load} shows {drafts} drafts: its server speculates whatever the arm says"
        )
    k = (config or {}).get("num_speculative_tokens")
    if not speculative or not isinstance(k, int) or isinstance(k, bool) or k < 1:
        return None
    schedule = (config or {}).get("draft_length_schedule")
    head = f"{CONFIG_MISMATCH}: {arm} is configured with num_speculative_tokens {k}, yet at load {load}"
    if schedule != "heuristic":
        max_drafted, positions = evidence.get("max_drafted"), evidence.get("positions")
        if isinstance(max_drafted, int) and max_drafted > k:
            return f"{head} a step drafted {max_drafted} tokens"
        if drafted is not None and drafted > k * drafts:
            return f"{head} its {evidence['source']} evidence shows {drafted / drafts:.2f} tokens per draft"
        if isinstance(positions, int) and positions > k:
            return f"{head} the server counts acceptance at {positions} draft positions"
    steps, max_drafted = evidence.get("n_draft_steps"), evidence.get("max_drafted")
    variable = schedule == "dynamic" or (config or {}).get("method") in VARIABLE_LENGTH_METHODS
    if not variable and isinstance(max_drafted, int) and isinstance(steps, int) and steps >= MIN_STEPS_FOR_K:
        if max_drafted < k:
            return f"{head} {steps} drafting steps never drafted {k} tokens (at most {max_drafted})"
    return None
