"""A decision as a document a CTO can forward: Markdown and PDF (reportlab).

Both read one plain dict, :func:`decision_document`, built from the decision's snapshot, so the
two formats always say the same thing.
"""

from __future__ import annotations

import io
import re
import textwrap
from typing import Any

from console.decisions import selectors
from console.decisions.models import ArchiveRecord, Decision
from console.exports import markdown_block, markdown_code, markdown_inline

_LONG_WORD = re.compile(r"\S{201,}")
STATUS_LABEL = {"pass": "PASS", "fail": "FAIL", "not_measured": "NOT MEASURED"}


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, list):
        return " / ".join(_fmt(v) for v in value) + (f" {unit}" if unit else "")
    if isinstance(value, float):
        if unit == "bytes":
            return f"{value / 2**30:.2f} GiB"
        if unit == "fraction":
            return f"{value:.1%}"
        return f"{value:.4g}" + (f" {unit}" if unit else "")
    if isinstance(value, int) and unit == "bytes":
        return f"{value / 2**30:.2f} GiB"
    return f"{value}" + (f" {unit}" if unit else "")


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
        "proposal_label": decision.get_proposal_display(),
        "status_label": decision.get_status_display(),
        "experiment": evidence["experiment"],
        "trace": evidence["trace"],
        "configs": evidence["configs"],
        "versions": evidence["versions"],
        "hardware": evidence["hardware"],
        "archive": (
            {
                "sequence": record.sequence,
                "bundle_sha256": record.bundle_sha256,
                "previous_sha256": record.previous_sha256,
                "record_sha256": record.record_sha256,
            }
            if record
            else None
        ),
        "superseded_by": superseded_by.pk if superseded_by else None,
        "events": [
            {
                "action": e.action,
                "actor": e.actor.username,
                "role": e.actor_role,
                "at": selectors.iso_utc(e.at),
            }
            for e in selectors.decision_events(decision=decision)
        ],
    }


def _md_cell(text: Any) -> str:
    return markdown_inline(text)


def decision_markdown(*, decision: Decision) -> str:
    """The decision as Markdown. Every piece of text a user or a worker wrote goes through
    ``console.exports`` (``md``: one line, ``md_block``: paragraphs, ``code``: hashes), so no title,
    comment or note can make a heading, a list, a link or HTML of its own."""
    doc = decision_document(decision=decision)
    d, s = doc["decision"], doc["signoff"]
    gate = d["gate"] or {}
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
    out.append(f"- **Drafted by:** {md(doc['names']['created_by'])} at {md(d['created_at'])}")
    if d["supersedes_id"]:
        out.append(f"- **Supersedes:** decision #{d['supersedes_id']}")
    if doc["superseded_by"]:
        out.append(f"- **Superseded by:** decision #{doc['superseded_by']}")
    if d["policy_ref"] or d["policy"]:
        out.append(
            f"- **Policy:** {md(d['policy_ref'] or '')} {'(attached in the bundle)' if d['policy'] else ''}"
        )
    out += ["", "## Rationale", "", md_block(d["rationale"]) if d["rationale"] else "_none_", ""]
    out += [f"## Release gate: {md(str(gate.get('overall', 'not computed')).upper())}", ""]
    out += ["| Criterion | Result | Numbers |", "|---|---|---|"]
    for c in gate.get("criteria") or []:
        nums = "; ".join(f"{n['label']}: {_fmt(n['value'], n.get('unit', ''))}" for n in c["numbers"][:12])
        status = md(STATUS_LABEL.get(c["status"], c["status"]))
        out.append(f"| {_md_cell(c['title'])} | **{status}** {_md_cell(c['summary'])} | {_md_cell(nums)} |")
    deviations = gate.get("deviations") or []
    out += ["", "Gate settings that differ from the defaults: " + ("none" if not deviations else "")]
    for dv in deviations:
        out.append(f"- {code(dv.get('key'))}: {md(dv.get('value'))} (default {md(dv.get('default'))})")
    out += ["", "## Checklist", "", "| Question | Answer | Evidence / note |", "|---|---|---|"]
    for item in d["checklist"] or []:
        note = item.get("detail", "") + (f" (note: {item['note']})" if item.get("note") else "")
        answer = f"{item.get('answer') or 'unanswered'} ({item['source']})"
        out.append(f"| {_md_cell(item['question'])} | {_md_cell(answer)} | {_md_cell(note)} |")
    rb = d["rollback"]
    out += ["", "## Rollback plan", "", f"- **Owner:** {md(rb['owner'] or 'unassigned')}", "- **Triggers:**"]
    for t in rb["triggers"] or []:
        out.append(
            "  - "
            + md(
                f"{t.get('metric')} {t.get('op')} {t.get('threshold')} {t.get('unit', '')} "
                f"for {t.get('window_min')} min"
            )
        )
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
    out += ["## Sign-off", ""]
    if s:
        out.append(
            f"- **{md(s['verdict'].replace('_', ' '))}** by {md(doc['names']['signer'])} "
            f"({md(s['role'])}) at {md(s['signed_at'])}"
        )
        out.append(f"- Comment: {md(s['comment'])}")
        if s["conditions"]:
            out.append(f"- Conditions: {md(s['conditions'])}")
        if s["override_reason"]:
            out.append(f"- **Gate override:** {md(s['override_reason'])}")
    else:
        out.append("_not signed_")
    out += ["", "## Evidence", ""]
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
        out.append(f"- Versions ({md(arm)}): " + md(", ".join(f"{k} {v}" for k, v in sorted(vs.items()))))
    for arm, hw in sorted(doc["hardware"].items()):
        out.append(f"- Hardware ({md(arm)}): " + md(", ".join(f"{k} {v}" for k, v in sorted(hw.items()))))
    if doc["archive"]:
        a = doc["archive"]
        out.append(
            f"- Archive record #{a['sequence']}: bundle sha256 {code(a['bundle_sha256'])}, "
            f"record sha256 {code(a['record_sha256'])}, previous {code(a['previous_sha256'])}"
        )
    out += ["", "## Audit trail", ""]
    for e in doc["events"]:
        out.append(f"- {md(e['at'])} {md(e['action'])} by {md(e['actor'])} ({md(e['role'])})")
    return "\n".join(out) + "\n"


def decision_pdf(*, decision: Decision) -> bytes:
    """The same document as :func:`decision_markdown`, as an A4 PDF."""
    from xml.sax.saxutils import escape

    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.lib.units import mm
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    doc = decision_document(decision=decision)
    d, s = doc["decision"], doc["signoff"]
    gate = d["gate"] or {}
    styles = getSampleStyleSheet()
    small = styles["BodyText"].clone("small", fontSize=8, leading=10)
    P = lambda text, style=small: Paragraph(escape(str(text)).replace("\n", "<br/>"), style)  # noqa: E731

    def text_block(label: str, text: str, style=styles["BodyText"]) -> list[Any]:
        """Free text as one paragraph per line, outside any table: a paragraph splits across pages,
        so no comment is too long to print. A "word" over 200 characters is cut every 40 (reportlab
        breaks one that long in quadratic time: a 200,000-character one took 20 s, cut 5 s)."""
        text = _LONG_WORD.sub(lambda m: " ".join(textwrap.wrap(m.group(), 40)), str(text))
        lines = text.replace("\r\n", "\n").split("\n")
        first = Paragraph(f"<b>{escape(label)}</b> " + escape(lines[0]), style)
        return [first] + [Paragraph(escape(line), style) for line in lines[1:] if line.strip()]

    def table(
        rows: list[list[Any]], widths: list[float], status_col: int | None = None, header: bool = True
    ) -> Table:
        t = Table(
            [[P(c) if not isinstance(c, Paragraph) else c for c in r] for r in rows],
            colWidths=widths,
            repeatRows=1 if header else 0,
            splitInRow=1,  # a cell taller than a page (a long note) continues on the next one
        )
        style = [
            ("GRID", (0, 0), (-1, -1), 0.4, colors.HexColor("#98a2b3")),
            ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ]
        if header:
            style.append(("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e4e7ec")))
        if status_col is not None:
            for i, r in enumerate(rows[1:], start=1):
                text = str(r[status_col])
                colour = (
                    "#dcfae6"
                    if text.startswith("PASS")
                    else "#fee4e2"
                    if text.startswith("FAIL")
                    else "#f2f4f7"
                )
                style.append(("BACKGROUND", (status_col, i), (status_col, i), colors.HexColor(colour)))
        t.setStyle(TableStyle(style))
        return t

    story: list[Any] = [Paragraph(escape(f"Decision #{d['id']}: {d['title']}"), styles["Title"])]
    facts = [
        ["Status", doc["status_label"]],
        [
            "Proposal",
            doc["proposal_label"]
            + (f" (candidate {doc['names']['candidate_arm']})" if d["candidate_arm_id"] else ""),
        ],
        ["Promised class", d["traffic_class"]],
        [
            "Experiment",
            f"{doc['experiment']['name']} (#{doc['experiment']['id']}), target {doc['experiment']['target_model']}",
        ],
        ["Drafted by", f"{doc['names']['created_by']} at {d['created_at']}"],
    ]
    if d["supersedes_id"]:
        facts.append(["Supersedes", f"decision #{d['supersedes_id']}"])
    if doc["superseded_by"]:
        facts.append(["Superseded by", f"decision #{doc['superseded_by']}"])
    story += [table(facts, [35 * mm, 140 * mm], header=False), Spacer(1, 4 * mm)]
    story += [Paragraph("Rationale", styles["Heading2"]), *text_block("", d["rationale"] or "none")]
    story.append(
        Paragraph(f"Release gate: {str(gate.get('overall', 'not computed')).upper()}", styles["Heading2"])
    )
    rows: list[list[Any]] = [["Criterion", "Result", "Numbers"]]
    for c in gate.get("criteria") or []:
        nums = "\n".join(f"{n['label']}: {_fmt(n['value'], n.get('unit', ''))}" for n in c["numbers"][:12])
        rows.append(
            [c["title"], f"{STATUS_LABEL.get(c['status'], c['status'])}\n{c['summary']}", nums or "-"]
        )
    story.append(table(rows, [45 * mm, 55 * mm, 75 * mm], status_col=1))
    deviations = gate.get("deviations") or []
    story.append(
        P(
            "Gate settings that differ from the defaults: "
            + ("; ".join(f"{dv.get('key')} = {dv.get('value')} (default {dv.get('default')})" for dv in deviations) or "none"),
            styles["BodyText"],
        )
    )
    story.append(Paragraph("Checklist", styles["Heading2"]))
    rows = [["Question", "Answer", "Evidence / note"]]
    for item in d["checklist"] or []:
        note = item.get("detail", "") + (f"\nnote: {item['note']}" if item.get("note") else "")
        rows.append([item["question"], f"{item.get('answer') or 'unanswered'} ({item['source']})", note])
    story.append(table(rows, [65 * mm, 25 * mm, 85 * mm]))
    rb = d["rollback"]
    story.append(Paragraph("Rollback plan", styles["Heading2"]))
    rows = [["Trigger metric", "Condition", "Window"]]
    for t in rb["triggers"] or []:
        rows.append(
            [
                t.get("metric"),
                f"{t.get('op')} {t.get('threshold')} {t.get('unit', '')}",
                f"{t.get('window_min')} min",
            ]
        )
    story.append(table(rows, [80 * mm, 60 * mm, 35 * mm]))
    cfg = rb["revert_config"] or {}
    story += [
        Spacer(1, 2 * mm),
        P(f"Owner: {rb['owner'] or 'unassigned'}", styles["BodyText"]),
        P(
            f"Revert to: {cfg.get('name', '?')} ({cfg.get('engine', '?')} {cfg.get('target_model', '?')}), config sha256 {cfg.get('content_hash', '?')}"
        ),
        *text_block("Steps:", "\n" + (rb["steps"] or "none")),
        *text_block("Verify the rollback:", "\n" + (rb["verification"] or "none")),
    ]
    story.append(Paragraph("Sign-off", styles["Heading2"]))
    if s:
        rows = [
            ["Verdict", "Signer", "Time"],
            [s["verdict"].replace("_", " "), f"{doc['names']['signer']} ({s['role']})", s["signed_at"]],
        ]
        story.append(table(rows, [45 * mm, 70 * mm, 60 * mm]))
        story.append(Spacer(1, 2 * mm))
        story += text_block("Comment:", s["comment"])
        if s["conditions"]:
            story += text_block("Conditions:", s["conditions"])
        if s["override_reason"]:
            story += text_block("GATE OVERRIDE:", s["override_reason"])
    else:
        story.append(P("Not signed.", styles["BodyText"]))
    story.append(Paragraph("Evidence", styles["Heading2"]))
    rows = [
        ["Item", "Value"],
        [
            "Trace",
            f"{doc['trace']['name']} sha256 {doc['trace']['sha256']}"
            + (f", content paired from {doc['trace']['paired_with']}" if doc["trace"]["paired_with"] else ""),
        ],
    ]
    for c in doc["configs"]:
        rows.append(
            [
                f"Config {c['arm']}" + (" (baseline)" if c["is_baseline"] else ""),
                f"{c['engine']} {c['target_model']} sha256 {c['content_hash']}",
            ]
        )
    for arm, vs in sorted(doc["versions"].items()):
        rows.append([f"Versions {arm}", ", ".join(f"{k} {v}" for k, v in sorted(vs.items()))])
    for arm, hw in sorted(doc["hardware"].items()):
        rows.append([f"Hardware {arm}", ", ".join(f"{k} {v}" for k, v in sorted(hw.items()))])
    if doc["archive"]:
        a = doc["archive"]
        rows += [
            [f"Archive record #{a['sequence']}", f"bundle sha256 {a['bundle_sha256']}"],
            ["Record sha256", a["record_sha256"]],
            ["Previous record sha256", a["previous_sha256"]],
        ]
    story.append(table(rows, [45 * mm, 130 * mm]))
    story.append(Paragraph("Audit trail", styles["Heading2"]))
    rows = [["Time", "Action", "Who"]] + [
        [e["at"], e["action"], f"{e['actor']} ({e['role']})"] for e in doc["events"]
    ]
    story.append(table(rows, [60 * mm, 40 * mm, 75 * mm]))

    buffer = io.BytesIO()
    pdf = SimpleDocTemplate(
        buffer,
        pagesize=A4,
        title=f"Decision #{d['id']}",
        author="specreview",
        leftMargin=17 * mm,
        rightMargin=17 * mm,
        topMargin=15 * mm,
        bottomMargin=15 * mm,
    )
    pdf.build(story)
    return buffer.getvalue()
