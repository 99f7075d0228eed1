"""A decision as a document a CTO can forward: the Markdown here, the PDF in ``decisions.pdf``.

Both read one plain dict, :func:`decision_document`, built from the decision's snapshot, so the
two formats always say the same thing.
"""

from __future__ import annotations

from typing import Any

from console import numbers
from console.decisions import selectors
from console.decisions.models import ArchiveRecord, Decision
from console.decisions.words import (
    VERDICTS,
    gate_number_text,
    plain_pairs,
    setting_value_text,
    stored_segments,
    stored_words,
    trigger_text,
    utc_text,
)
from console.exports import markdown_block, markdown_code, markdown_inline

STATUS_LABEL = {"pass": "PASS", "fail": "FAIL", "not_measured": "NOT MEASURED"}


def value_text(value: Any, unit: str = "") -> str:
    """A value in its unit as the exports and the gate table print it (:func:`console.numbers.show`:
    a dash for a missing value, GiB for bytes, a percentage for a fraction, seconds below one as
    milliseconds, three significant digits); a list's items each in the unit, joined by " / "."""
    return numbers.show(value, unit)


def decision_document(*, decision: Decision) -> dict[str, Any]:
    """Everything the exports print, as plain data."""
    snap = selectors.decision_snapshot_shown(decision=decision)
    record = ArchiveRecord.objects.filter(decision=decision).first()
    evidence = selectors.decision_evidence(
        experiment=decision.experiment,
        candidate_arm=decision.candidate_arm,
        facts=(decision.gate or {}).get("facts") or {},
    )
    superseded_by = selectors.decision_superseded_by(decision=decision)
    return {
        "names": selectors.decision_names(decision=decision),
        "decision": snap["decision"],
        "signoff": snap["signoff"],
        "signoffs": snap["signoffs"],  # every signature, in order (the last one is ``signoff`` once signed)
        "approvals_required": snap["approvals_required"],
        "proposal_label": decision.get_proposal_display(),
        "status_label": decision.get_status_display(),
        "experiment": evidence["experiment"],
        "trace": evidence["trace"],
        "configs": evidence["configs"],
        "versions": evidence["versions"],
        "hardware": evidence["hardware"],
        "archive": selectors.archive_hashes(record),
        "superseded_by": superseded_by.pk if superseded_by else None,
        "events": selectors.decision_audit_rows(decision=decision),
    }


def _md_cell(text: Any) -> str:
    return markdown_inline(text)


def _md_code_span(text: str, *, in_table: bool) -> str:
    """``text`` as one Markdown code span (shown literally: no escaping inside one), fenced by more
    backticks than it holds; in a table cell a pipe is escaped, as GFM tables need."""
    text = " ".join(text.split())
    if in_table:
        text = text.replace("|", "\\|")
    fence = "`" * (_longest_backticks(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _longest_backticks(text: str) -> int:
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return longest


def _md_stored(text: Any, *, in_table: bool = True) -> str:
    """Stored gate or checklist text (console.decisions.words.stored_segments) as Markdown: words
    escaped, a stored config as JSON in a code span."""
    out = []
    for piece, is_code in stored_segments(text):
        if is_code:
            out.append(_md_code_span(piece, in_table=in_table))
            continue
        shown = markdown_inline(piece)
        lead = " " if piece[:1].isspace() and out else ""
        trail = " " if piece[-1:].isspace() else ""
        out.append(f"{lead}{shown}{trail}" if shown else lead or trail)
    return "".join(out).strip()


def decision_markdown(*, decision: Decision) -> str:
    """The decision as Markdown. Every piece of text a user or a worker wrote goes through
    ``console.exports`` (``md``: one line, ``md_block``: paragraphs, ``code``: hashes), so no title,
    comment or note can make a heading, a list, a link or HTML of its own."""
    doc = decision_document(decision=decision)
    out = [
        *_md_facts(doc),
        *_md_gate(doc),
        *_md_checklist(doc),
        *_md_rollback(doc),
        *_md_signoff(doc),
        *_md_evidence(doc),
        *_md_audit(doc),
    ]
    return "\n".join(out) + "\n"


def _md_facts(doc: dict[str, Any]) -> list[str]:
    d = doc["decision"]
    md, md_block, code = markdown_inline, markdown_block, markdown_code
    out = [f"# Decision #{d['id']}: {md(d['title'])}", ""]
    out.append(f"- **Status:** {md(doc['status_label'])}")
    out.append(
        f"- **Proposal:** {md(doc['proposal_label'])}"
        + (f" (candidate {code(doc['names']['candidate_arm'])})" if d["candidate_arm_id"] else "")
    )
    out.append(f"- **Promised traffic class:** {md(d['traffic_class'])}")
    out.append(
        f"- **Experiment:** {md(doc['experiment']['name'])} (#{doc['experiment']['id']}), "
        f"target {md(doc['experiment']['target_model'])}"
    )
    out.append(f"- **Drafted by:** {md(doc['names']['created_by'])} at {md(utc_text(d['created_at']))}")
    if d["supersedes_id"]:
        out.append(f"- **Supersedes:** decision #{d['supersedes_id']}")
    if doc["superseded_by"]:
        out.append(f"- **Superseded by:** decision #{doc['superseded_by']}")
    if d["policy_ref"] or d["policy"]:
        out.append(
            f"- **Policy:** {md(d['policy_ref'] or '')} {'(attached in the bundle)' if d['policy'] else ''}"
        )
    out += ["", "## Rationale", "", md_block(d["rationale"]) if d["rationale"] else "_none_", ""]
    return out


def _md_gate(doc: dict[str, Any]) -> list[str]:
    gate = doc["decision"]["gate"] or {}
    md, code = markdown_inline, markdown_code
    out = [f"## Release gate: {md(str(gate.get('overall', 'not computed')).upper())}", ""]
    out += ["| Criterion | Result | Numbers |", "|---|---|---|"]
    for c in gate.get("criteria") or []:
        nums = "; ".join(f"{stored_words(n['label'])}: {gate_number_text(n)}" for n in c["numbers"][:12])
        status = md(STATUS_LABEL.get(c["status"], c["status"]))
        out.append(f"| {_md_cell(c['title'])} | **{status}** {_md_stored(c['summary'])} | {_md_cell(nums)} |")
    deviations = gate.get("deviations") or []
    out += ["", "Gate settings that differ from the defaults: " + ("none" if not deviations else "")]
    for dv in deviations:
        out.append(
            f"- {code(dv.get('key'))}: {_md_setting(dv.get('value'))} (default {_md_setting(dv.get('default'))})"
        )
    return out


def _md_setting(value: Any) -> str:
    """A gate setting's value: a short number or a name as it reads, none as "none", anything else
    (a list, an object, a long float) as the JSON one would type, in code."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return markdown_inline(value)
    text = setting_value_text(value)
    short = len(text.lstrip("-").replace(".", "").lstrip("0")) <= 4 or "." not in text
    if isinstance(value, int | float) and not isinstance(value, bool) and short:
        return markdown_inline(text)
    return _md_code_span(text, in_table=False)


def _md_checklist(doc: dict[str, Any]) -> list[str]:
    out = ["", "## Checklist", "", "| Question | Answer | Evidence / note |", "|---|---|---|"]
    for item in doc["decision"]["checklist"] or []:
        note = _md_stored(item.get("detail", "")) + (f" (note: {_md_cell(item['note'])})" if item.get("note") else "")
        answer = f"{item.get('answer') or 'unanswered'} ({item['source']})"
        out.append(f"| {_md_cell(item['question'])} | {_md_cell(answer)} | {note} |")
    return out


def _md_rollback(doc: dict[str, Any]) -> list[str]:
    rb = doc["decision"]["rollback"]
    md, md_block, code = markdown_inline, markdown_block, markdown_code
    out = ["", "## Rollback plan", "", f"- **Owner:** {md(rb['owner'] or 'unassigned')}", "- **Triggers:**"]
    for t in rb["triggers"] or []:
        out.append("  - " + md(trigger_text(t)))
    cfg = rb["revert_config"] or {}
    out.append(
        f"- **Revert to:** {md(cfg.get('name', '?'))} ({md(cfg.get('engine', '?'))} "
        f"{md(cfg.get('target_model', '?'))}, config sha256 {code(cfg.get('content_hash', '?'))})"
    )
    out += [
        "",
        "**Steps**",
        "",
        md_block(rb["steps"]) if rb["steps"] else "_none_",
        "",
        "**Verify the rollback**",
        "",
        md_block(rb["verification"]) if rb["verification"] else "_none_",
        "",
    ]
    return out


def _md_signoff(doc: dict[str, Any]) -> list[str]:
    md = markdown_inline
    out = ["## Sign-off", ""]
    approvals = sum(1 for s in doc["signoffs"] if s["verdict"] != "rejected")
    out.append(f"- Approvals required: {doc['approvals_required']} ({approvals} given)")
    for s in doc["signoffs"]:
        out.append(
            f"- **{md(VERDICTS.get(s['verdict'], s['verdict'].replace('_', ' ')))}** by {md(s['signer_username'])} "
            f"({md(s['role'])}) at {md(utc_text(s['signed_at']))}"
        )
        out.append(f"- Comment: {md(s['comment'])}")
        if s["conditions"]:
            out.append(f"- Conditions: {md(s['conditions'])}")
        if s["override_reason"]:
            out.append(f"- **Gate override:** {md(s['override_reason'])}")
    if not doc["signoff"]:
        out.append("_not signed_")
    return out


def _md_evidence(doc: dict[str, Any]) -> list[str]:
    md, code = markdown_inline, markdown_code
    out = ["", "## Evidence", ""]
    out.append(
        f"- Trace {md(doc['trace']['name'])} sha256 {code(doc['trace']['sha256'])}"
        + (f", content paired from {md(doc['trace']['paired_with'])}" if doc["trace"]["paired_with"] else "")
    )
    for c in doc["configs"]:
        out.append(
            f"- Config {code(c['arm'])}{' (baseline)' if c['is_baseline'] else ''}: {md(c['engine'])} "
            f"{md(c['target_model'])}, sha256 {code(c['content_hash'])}"
        )
    for arm, vs in sorted(doc["versions"].items()):
        out.append(f"- Versions ({md(arm)}): " + md(plain_pairs(vs)))
    for arm, hw in sorted(doc["hardware"].items()):
        out.append(f"- Hardware ({md(arm)}): " + md(plain_pairs(hw)))
    if doc["archive"]:
        a = doc["archive"]
        out.append(
            f"- Archive record #{a['sequence']}: bundle sha256 {code(a['bundle_sha256'])}, "
            f"record sha256 {code(a['record_sha256'])}, previous {code(a['previous_sha256'])}"
        )
    return out


def _md_audit(doc: dict[str, Any]) -> list[str]:
    md = markdown_inline
    out = ["", "## Audit trail", ""]
    for e in doc["events"]:
        out.append(f"- {md(utc_text(e['at']))} {md(e['action'])} by {md(e['actor'])} ({md(e['role'])})")
    return out
