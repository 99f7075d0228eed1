"""A decision as a document a CTO can forward: Markdown and PDF (reportlab).

Both read one plain dict, :func:`decision_document`, built from the decision's snapshot, so the
two formats always say the same thing.
"""

from __future__ import annotations

import io
from typing import Any

from console.decisions import selectors
from console.decisions.models import ArchiveRecord, Decision

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
    snap = selectors.decision_snapshot(decision=decision)
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
    return str(text).replace("|", "\\|").replace("\n", " ")


def decision_markdown(*, decision: Decision) -> str:
    doc = decision_document(decision=decision)
    d, s = doc["decision"], doc["signoff"]
    gate = d["gate"] or {}
    out = [f"# Decision #{d['id']}: {d['title']}", ""]
    out.append(f"- **Status:** {doc['status_label']}")
    out.append(
        f"- **Proposal:** {doc['proposal_label']}"
        + (f" (candidate `{doc['names']['candidate_arm']}`)" if d["candidate_arm_id"] else "")
    )
    out.append(f"- **Promised traffic class:** {d['traffic_class']}")
    out.append(
        f"- **Experiment:** {doc['experiment']['name']} (#{doc['experiment']['id']}), target {doc['experiment']['target_model']}"
    )
    out.append(f"- **Drafted by:** {doc['names']['created_by']} at {d['created_at']}")
    if d["supersedes_id"]:
        out.append(f"- **Supersedes:** decision #{d['supersedes_id']}")
    if doc["superseded_by"]:
        out.append(f"- **Superseded by:** decision #{doc['superseded_by']}")
    if d["policy_ref"] or d["policy"]:
        out.append(
            f"- **Policy:** {d['policy_ref'] or ''} {'(attached in the bundle)' if d['policy'] else ''}"
        )
    out += ["", "## Rationale", "", d["rationale"] or "_none_", ""]
    out += [f"## Release gate: {str(gate.get('overall', 'not computed')).upper()}", ""]
    out += ["| Criterion | Result | Numbers |", "|---|---|---|"]
    for c in gate.get("criteria") or []:
        nums = "; ".join(f"{n['label']}: {_fmt(n['value'], n.get('unit', ''))}" for n in c["numbers"][:12])
        out.append(
            f"| {_md_cell(c['title'])} | **{STATUS_LABEL.get(c['status'], c['status'])}** {_md_cell(c['summary'])} | {_md_cell(nums)} |"
        )
    out += ["", "## Checklist", "", "| Question | Answer | Evidence / note |", "|---|---|---|"]
    for item in d["checklist"] or []:
        note = item.get("detail", "") + (f" (note: {item['note']})" if item.get("note") else "")
        out.append(
            f"| {_md_cell(item['question'])} | {item.get('answer') or 'unanswered'} ({item['source']}) | {_md_cell(note)} |"
        )
    rb = d["rollback"]
    out += ["", "## Rollback plan", "", f"- **Owner:** {rb['owner'] or 'unassigned'}", "- **Triggers:**"]
    for t in rb["triggers"] or []:
        out.append(
            f"  - {t.get('metric')} {t.get('op')} {t.get('threshold')} {t.get('unit', '')} for {t.get('window_min')} min"
        )
    cfg = rb["revert_config"] or {}
    out.append(
        f"- **Revert to:** {cfg.get('name', '?')} ({cfg.get('engine', '?')} {cfg.get('target_model', '?')}, config sha256 `{cfg.get('content_hash', '?')}`)"
    )
    out += [
        "",
        "**Steps**",
        "",
        rb["steps"] or "_none_",
        "",
        "**Verify the rollback**",
        "",
        rb["verification"] or "_none_",
        "",
    ]
    out += ["## Sign-off", ""]
    if s:
        out.append(
            f"- **{s['verdict'].replace('_', ' ')}** by {doc['names']['signer']} ({s['role']}) at {s['signed_at']}"
        )
        out.append(f"- Comment: {s['comment']}")
        if s["conditions"]:
            out.append(f"- Conditions: {s['conditions']}")
        if s["override_reason"]:
            out.append(f"- **Gate override:** {s['override_reason']}")
    else:
        out.append("_not signed_")
    out += ["", "## Evidence", ""]
    out.append(
        f"- Trace `{doc['trace']['name']}` sha256 `{doc['trace']['sha256']}`"
        + (f", content paired from {doc['trace']['paired_with']}" if doc["trace"]["paired_with"] else "")
    )
    for c in doc["configs"]:
        out.append(
            f"- Config `{c['arm']}`{' (baseline)' if c['is_baseline'] else ''}: {c['engine']} {c['target_model']}, sha256 `{c['content_hash']}`"
        )
    for arm, vs in sorted(doc["versions"].items()):
        out.append(f"- Versions ({arm}): " + ", ".join(f"{k} {v}" for k, v in sorted(vs.items())))
    for arm, hw in sorted(doc["hardware"].items()):
        out.append(f"- Hardware ({arm}): " + ", ".join(f"{k} {v}" for k, v in sorted(hw.items())))
    if doc["archive"]:
        a = doc["archive"]
        out.append(
            f"- Archive record #{a['sequence']}: bundle sha256 `{a['bundle_sha256']}`, record sha256 `{a['record_sha256']}`, previous `{a['previous_sha256']}`"
        )
    out += ["", "## Audit trail", ""]
    for e in doc["events"]:
        out.append(f"- {e['at']} {e['action']} by {e['actor']} ({e['role']})")
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

    def table(
        rows: list[list[Any]], widths: list[float], status_col: int | None = None, header: bool = True
    ) -> Table:
        t = Table(
            [[P(c) if not isinstance(c, Paragraph) else c for c in r] for r in rows],
            colWidths=widths,
            repeatRows=1 if header else 0,
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
    story += [Paragraph("Rationale", styles["Heading2"]), P(d["rationale"] or "none", styles["BodyText"])]
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
        P("Steps:\n" + (rb["steps"] or "none"), styles["BodyText"]),
        P("Verify the rollback:\n" + (rb["verification"] or "none"), styles["BodyText"]),
    ]
    story.append(Paragraph("Sign-off", styles["Heading2"]))
    if s:
        rows = [
            ["Verdict", "Signer", "Time", "Comment"],
            [
                s["verdict"].replace("_", " "),
                f"{doc['names']['signer']} ({s['role']})",
                s["signed_at"],
                s["comment"],
            ],
        ]
        story.append(table(rows, [35 * mm, 35 * mm, 40 * mm, 65 * mm]))
        if s["conditions"]:
            story.append(P(f"Conditions: {s['conditions']}", styles["BodyText"]))
        if s["override_reason"]:
            story.append(P(f"GATE OVERRIDE: {s['override_reason']}", styles["BodyText"]))
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
