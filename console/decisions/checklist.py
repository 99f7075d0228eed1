"""The CTO's checklist: pre-filled from evidence where it can be, answered by the engineer where
it cannot. Pure functions over plain dicts; no Django.

The questions are the ones a CTO asks before approval (see docs/decisions.md): production
traces, the current serving path, p95 and p99, acceptance by prompt type, memory impact, quality
regressions, framework compatibility, the change evaluated alone, a rollback plan.

Evidence (built by ``selectors.decision_evidence``): ``trace`` (``name``, ``sha256``,
``paired_with``, ``arrival_spec``), ``baseline`` and ``candidate`` configs (``engine``,
``target_model``, ``engine_args``, ``speculative_config``), ``experiment_sampling``, ``versions``
({arm: {library: version}}), ``structured`` ({"response_format": n, "tools": n} request counts),
``stats_reported`` (set of ``pNN`` stats in the comparison), ``acceptance_by_task`` (bool),
``facts`` (the gate facts), ``rollback`` (the plan), ``configs`` ([{arm, content_hash, ...}]),
``fit`` (the experiment's fit assessment, ``console.analysis.fit_assessment``: listed as its own section, one
row per condition, informational).

A question in ``CONDITIONAL`` is asked only when the evidence calls for it: the separate gate of a
cross-vocabulary draft appears only when the candidate's runs recorded one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.analysis.comparison.spec import draft_cross_vocabulary
from console.decisions.triggers import trigger_valid

YES, NO = "yes", "no"
FIT_SECTION = "fit"  # items of the fit-assessment section: evidence to read, never answered

QUESTIONS: tuple[tuple[str, str], ...] = (
    ("production_traces", "The benchmark used production traces (and says whether content was paired)"),
    ("current_serving_path", "It was compared against the current serving path"),
    ("p95_p99", "p95 and p99 latency are reported"),
    ("acceptance_by_prompt_type", "Acceptance distributions are reported by prompt type"),
    ("memory_impact", "Memory impact is measured"),
    ("quality_results", "Quality-regression results are reported"),
    (
        "framework_compatibility",
        "Framework compatibility is noted (engine, versions, structured output and tool calls with speculation)",
    ),
    ("changes_alone", "The change was evaluated alone (no quantization or sampling change combined with it)"),
    ("rollback_plan", "A rollback plan is present"),
    (
        "cross_vocabulary_gate",
        "The candidate's cross-vocabulary draft is judged by a separate gate (greedy-only on hf)",
    ),
)
CONDITIONAL: frozenset[str] = frozenset({"cross_vocabulary_gate"})


def _candidate_label(evidence: Mapping[str, Any]) -> str | None:
    cand = evidence.get("candidate") or {}
    if not cand.get("content_hash"):
        return None
    return next(
        (str(c.get("arm")) for c in evidence.get("configs") or [] if c.get("content_hash") == cand["content_hash"]),
        None,
    )


def rollback_complete(plan: Mapping[str, Any]) -> list[str]:
    """What the rollback plan still lacks (empty when complete)."""
    missing = []
    triggers = plan.get("triggers") or []
    if not triggers:
        missing.append("at least one trigger")
    elif not all(trigger_valid(t) for t in triggers):
        missing.append("a metric, comparison, numeric threshold and window on every trigger (and a query where it compares with the control)")
    if not plan.get("revert_config"):
        missing.append("the config to revert to")
    for key, label in (
        ("steps", "steps"),
        ("owner", "an owner"),
        ("verification", "how to verify the rollback"),
    ):
        if not str(plan.get(key) or "").strip():
            missing.append(label)
    return missing


def _config_diff(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[str]:
    diffs = []
    for key in ("engine", "target_model"):
        if baseline.get(key) != candidate.get(key):
            diffs.append(key)
    b_args, c_args = baseline.get("engine_args") or {}, candidate.get("engine_args") or {}
    for key in sorted(set(b_args) | set(c_args)):
        if b_args.get(key) != c_args.get(key) and key != "speculative_config":
            diffs.append(f"engine_args.{key}")
    return diffs


def checklist_prefill(evidence: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One item per question: ``key``, ``question``, ``source`` ("evidence" when the evidence
    settles it, else "engineer"), ``answer`` ("yes" | "no" | None), ``detail`` (what the
    evidence shows)."""
    items = {
        item["key"]: item
        for item in (*_setup_items(evidence), *_measured_items(evidence), *_change_items(evidence))
    }
    return [items[key] for key, _ in QUESTIONS if key in items] + checklist_fit_items(evidence.get("fit") or {})


def _item(key: str, answer: str | None, detail: str, source: str = "evidence") -> dict[str, Any]:
    return {
        "key": key,
        "question": dict(QUESTIONS)[key],
        "source": source,
        "answer": answer,
        "detail": detail,
    }


def _setup_items(evidence: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What was run, against what, on which versions: the engineer answers these, the evidence
    only shows them."""
    trace = evidence.get("trace") or {}
    paired = trace.get("paired_with")
    detail = f"trace {trace.get('name', '?')} (sha256 {str(trace.get('sha256', ''))[:12]}…), arrivals: {trace.get('arrival_spec') or 'from the trace'}; "
    detail += f"content paired from {paired}" if paired else "content is the trace's own"
    out = [_item("production_traces", None, detail, source="engineer")]

    base = evidence.get("baseline") or {}
    out.append(
        _item(
            "current_serving_path",
            None,
            f"baseline: {base.get('engine', '?')} {base.get('target_model', '?')} args {base.get('engine_args') or {}}",
            source="engineer",
        )
    )

    versions = evidence.get("versions") or {}
    structured = evidence.get("structured") or {}
    cand = evidence.get("candidate") or {}
    detail = f"engine {cand.get('engine') or base.get('engine', '?')}; versions: "
    detail += (
        "; ".join(
            f"{arm}: {', '.join(f'{k} {v}' for k, v in sorted(vs.items()))}"
            for arm, vs in sorted(versions.items())
        )
        or "not recorded"
    )
    detail += f"; requests with response_format: {structured.get('response_format', 0)}, with tools: {structured.get('tools', 0)}"
    out.append(_item("framework_compatibility", None, detail, source="engineer"))
    return out


def _measured_items(evidence: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What the comparison and the gate facts measured: settled by the evidence."""
    facts = evidence.get("facts") or {}
    stats = set(evidence.get("stats_reported") or ())
    have = {"p95", "p99"} <= stats
    out = [_item("p95_p99", YES if have else NO, "reported: " + (", ".join(sorted(stats)) or "none"))]

    out.append(
        _item(
            "acceptance_by_prompt_type",
            YES if evidence.get("acceptance_by_task") else NO,
            "acceptance by task in the comparison"
            if evidence.get("acceptance_by_task")
            else "no acceptance-by-task table",
        )
    )

    memory = facts.get("memory")
    if facts.get("kv"):  # an engine that preallocates its KV cache: what the drafter takes from it
        out.append(_item("memory_impact", YES, "KV capacity and preemptions per arm measured"))
    else:
        out.append(
            _item("memory_impact", YES if memory else NO, "peak memory per arm measured" if memory else "not measured")
        )

    quality = facts.get("quality")
    if quality and any(int(c.get("n") or 0) for c in quality.get("checks") or []):
        checks = quality.get("checks") or []
        n = sum(int(c.get("regressions") or 0) for c in checks)
        tasks = {c.get("slice") for c in checks}
        out.append(_item("quality_results", YES, f"{len(tasks)} tasks checked, {n} regressions"))
    else:
        out.append(_item("quality_results", NO, "no quality-equivalence results"))
    return out


def _change_items(evidence: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The change itself: evaluated alone, with a way back, and a cross-vocabulary draft gated
    on its own."""
    base = evidence.get("baseline") or {}
    cand = evidence.get("candidate") or {}
    if cand:
        diffs = _config_diff(base, cand)
        if evidence.get("experiment_sampling") not in (None, "trace", "greedy"):
            diffs.append("sampling")
        out = [
            _item(
                "changes_alone",
                NO if diffs else YES,
                ("candidate also changes: " + ", ".join(diffs))
                if diffs
                else "candidate differs from the baseline only in its speculative config",
            )
        ]
    else:
        out = [_item("changes_alone", YES, "no candidate config: the proposal changes nothing in serving")]

    missing = rollback_complete(evidence.get("rollback") or {})
    out.append(
        _item(
            "rollback_plan",
            NO if missing else YES,
            ("missing: " + ", ".join(missing))
            if missing
            else "triggers, revert config, steps, owner, verification",
        )
    )
    label = _candidate_label(evidence)
    if label is not None and draft_cross_vocabulary((evidence.get("versions") or {}).get(label)):
        out.append(
            _item(
                "cross_vocabulary_gate",
                None,
                f"arm {label} drafts with a model whose tokenizer differs from the target's (universal assisted "
                "generation): the hf engine runs it greedy-only, and its exact-match check means nothing under "
                "sampling; gate it separately from same-vocabulary drafts, on greedy traffic",
                source="engineer",
            )
        )
    return out


def checklist_fit_items(fit: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fit-assessment section: one item per condition, its verdict (likely, unlikely,
    unknown) as the answer and its reason as the detail, then one per traffic class whose
    generation share is under one half. Informational: they never block a submission."""
    out = []
    for c in fit.get("conditions") or []:
        out.append(
            {
                "key": f"fit_{c.get('name')}",
                "question": f"Fit: {c.get('title')}",
                "section": FIT_SECTION,
                "source": "evidence",
                "answer": c.get("verdict"),
                "detail": f"{c.get('reason')} ({fit.get('stage')})",
            }
        )
    for g in fit.get("generation_share") or []:
        if g.get("warning"):
            out.append(
                {
                    "key": f"fit_generation_share_{g.get('traffic_class')}",
                    "question": f"Fit: generation share of end-to-end latency, {g.get('traffic_class')}",
                    "section": FIT_SECTION,
                    "source": "evidence",
                    "answer": "warning",
                    "detail": str(g["warning"]),
                }
            )
    return out


def checklist_merge(
    prefilled: list[dict[str, Any]], answers: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Apply the engineer's ``answers`` ({key: {"answer", "note"}}): an answer counts only where
    the evidence does not settle the item; a note is kept on every item."""
    merged = []
    for item in prefilled:
        given = answers.get(item["key"]) or {}
        out = dict(item, note=str(given.get("note") or ""))
        if item["source"] == "engineer" and given.get("answer") in (YES, NO):
            out["answer"] = given["answer"]
        merged.append(out)
    return merged


def checklist_unanswered(items: list[dict[str, Any]]) -> list[str]:
    """Keys of the items with no answer yet (the fit section is read, not answered)."""
    return [i["key"] for i in items if i.get("section") != FIT_SECTION and i.get("answer") not in (YES, NO)]
