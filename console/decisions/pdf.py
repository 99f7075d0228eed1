"""A decision as an A4 PDF (reportlab): the same document as the Markdown export, from the same dict.

Two steps with a seam between them: each section of :func:`decision_document` becomes a list of
plain blocks (a heading, a line, a block of free text, a table, a gap: data, no reportlab), and
:func:`story_pdf` turns the blocks into reportlab flowables and lays them out. reportlab is imported
only in that second step, so no page but the PDF download pays for loading it (about 0.6 s).
"""

from __future__ import annotations

import io
import re
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

from console.decisions.export import STATUS_LABEL, decision_document
from console.decisions.models import Decision
from console.decisions.words import (
    VERDICTS,
    gate_number_text,
    plain_pairs,
    setting_value_text,
    stored_text,
    stored_words,
    trigger_condition,
    utc_text,
)

if TYPE_CHECKING:
    from reportlab.lib.styles import ParagraphStyle, StyleSheet1
    from reportlab.platypus import Flowable, Paragraph, Table

_LONG_WORD = re.compile(r"\S{201,}")


@dataclass(frozen=True)
class Heading:
    """A title or a section heading (one paragraph in a heading style)."""

    text: str
    style: str = "Heading2"


@dataclass(frozen=True)
class Line:
    """A short paragraph; a newline in it breaks the line. ``small`` is 8 pt body text."""

    text: Any
    style: str = "small"


@dataclass(frozen=True)
class TextBlock:
    """Free text a user wrote, after a bold label: one paragraph per line, outside any table."""

    label: str
    text: Any


@dataclass(frozen=True)
class Grid:
    """A table of small-text cells; ``widths_mm`` per column in millimetres. With ``status_col``,
    that column's cell is green when it starts with PASS, red with FAIL, grey otherwise."""

    rows: list[list[Any]]
    widths_mm: tuple[float, ...]
    status_col: int | None = None
    header: bool = True


@dataclass(frozen=True)
class Gap:
    """Vertical space, in millimetres."""

    height_mm: float


Block = Heading | Line | TextBlock | Grid | Gap


def decision_pdf(*, decision: Decision) -> bytes:
    """The same document as :func:`console.decisions.export.decision_markdown`, as an A4 PDF."""
    doc = decision_document(decision=decision)
    return story_pdf(decision_story(doc), title=f"Decision #{doc['decision']['id']}")


def decision_story(doc: dict[str, Any]) -> list[Block]:
    """The PDF's blocks, in reading order, for one :func:`decision_document`."""
    return [
        *_facts(doc),
        *_rationale(doc),
        *_gate(doc),
        *_checklist(doc),
        *_rollback(doc),
        *_signoff(doc),
        *_evidence(doc),
        *_audit(doc),
    ]


# --- the sections, as blocks --------------------------------------------------------------------


def _facts(doc: dict[str, Any]) -> list[Block]:
    d = doc["decision"]
    experiment = doc["experiment"]
    facts = [
        ["Status", doc["status_label"]],
        [
            "Proposal",
            doc["proposal_label"]
            + (f" (candidate {doc['names']['candidate_arm']})" if d["candidate_arm_id"] else ""),
        ],
        ["Promised class", d["traffic_class"]],
        ["Experiment", f"{experiment['name']} (#{experiment['id']}), target {experiment['target_model']}"],
        ["Drafted by", f"{doc['names']['created_by']} at {utc_text(d['created_at'])}"],
    ]
    if d["supersedes_id"]:
        facts.append(["Supersedes", f"decision #{d['supersedes_id']}"])
    if doc["superseded_by"]:
        facts.append(["Superseded by", f"decision #{doc['superseded_by']}"])
    return [
        Heading(f"Decision #{d['id']}: {d['title']}", "Title"),
        Grid(facts, (35, 140), header=False),
        Gap(4),
    ]


def _rationale(doc: dict[str, Any]) -> list[Block]:
    return [Heading("Rationale"), TextBlock("", doc["decision"]["rationale"] or "none")]


def _gate(doc: dict[str, Any]) -> list[Block]:
    gate = doc["decision"]["gate"] or {}
    rows: list[list[Any]] = [["Criterion", "Result", "Numbers"]]
    for c in gate.get("criteria") or []:
        nums = "\n".join(f"{stored_words(n['label'])}: {gate_number_text(n)}" for n in c["numbers"][:12])
        rows.append(
            [c["title"], f"{STATUS_LABEL.get(c['status'], c['status'])}\n{stored_text(c['summary'])}", nums or "-"]
        )
    deviations = "; ".join(
        f"{stored_words(dv.get('key'))} = {setting_value_text(dv.get('value'))} "
        f"(default {setting_value_text(dv.get('default'))})"
        for dv in gate.get("deviations") or []
    )
    return [
        Heading(f"Release gate: {str(gate.get('overall', 'not computed')).upper()}"),
        Grid(rows, (45, 55, 75), status_col=1),
        Line("Gate settings that differ from the defaults: " + (deviations or "none"), "BodyText"),
    ]


def _checklist(doc: dict[str, Any]) -> list[Block]:
    rows: list[list[Any]] = [["Question", "Answer", "Evidence / note"]]
    for item in doc["decision"]["checklist"] or []:
        note = stored_text(item.get("detail", "")) + (f"\nnote: {item['note']}" if item.get("note") else "")
        rows.append([item["question"], f"{item.get('answer') or 'unanswered'} ({item['source']})", note])
    return [Heading("Checklist"), Grid(rows, (65, 25, 85))]


def _rollback(doc: dict[str, Any]) -> list[Block]:
    rb = doc["decision"]["rollback"]
    rows: list[list[Any]] = [["Trigger metric", "Condition", "Window"]]
    for t in rb["triggers"] or []:
        rows.append([t.get("metric"), trigger_condition(t), f"{t.get('window_min')} min"])
    cfg = rb["revert_config"] or {}
    revert = (
        f"Revert to: {cfg.get('name', '?')} ({cfg.get('engine', '?')} {cfg.get('target_model', '?')}), "
        f"config sha256 {cfg.get('content_hash', '?')}"
    )
    return [
        Heading("Rollback plan"),
        Grid(rows, (80, 60, 35)),
        Gap(2),
        Line(f"Owner: {rb['owner'] or 'unassigned'}", "BodyText"),
        Line(revert),
        TextBlock("Steps:", "\n" + (rb["steps"] or "none")),
        TextBlock("Verify the rollback:", "\n" + (rb["verification"] or "none")),
    ]


def _signoff(doc: dict[str, Any]) -> list[Block]:
    signatures = doc["signoffs"]
    approvals = sum(1 for s in signatures if s["verdict"] != "rejected")
    out: list[Block] = [
        Heading("Sign-off"),
        Line(f"Approvals required: {doc['approvals_required']} ({approvals} given).", "BodyText"),
    ]
    if not doc["signoff"]:
        out.append(Line("Not signed.", "BodyText"))
    for s in signatures:
        rows = [
            ["Verdict", "Signer", "Time"],
            [
                VERDICTS.get(s["verdict"], s["verdict"].replace("_", " ")),
                f"{s['signer_username']} ({s['role']})",
                utc_text(s["signed_at"]),
            ],
        ]
        out += [Grid(rows, (45, 70, 60)), Gap(2), TextBlock("Comment:", s["comment"])]
        if s["conditions"]:
            out.append(TextBlock("Conditions:", s["conditions"]))
        if s["override_reason"]:
            out.append(TextBlock("GATE OVERRIDE:", s["override_reason"]))
    return out


def _evidence(doc: dict[str, Any]) -> list[Block]:
    trace = doc["trace"]
    paired = f", content paired from {trace['paired_with']}" if trace["paired_with"] else ""
    rows: list[list[Any]] = [
        ["Item", "Value"],
        ["Trace", f"{trace['name']} sha256 {trace['sha256']}{paired}"],
    ]
    for c in doc["configs"]:
        rows.append(
            [
                f"Config {c['arm']}" + (" (baseline)" if c["is_baseline"] else ""),
                f"{c['engine']} {c['target_model']} sha256 {c['content_hash']}",
            ]
        )
    for arm, vs in sorted(doc["versions"].items()):
        rows.append([f"Versions {arm}", plain_pairs(vs)])
    for arm, hw in sorted(doc["hardware"].items()):
        rows.append([f"Hardware {arm}", plain_pairs(hw)])
    if doc["archive"]:
        a = doc["archive"]
        rows += [
            [f"Archive record #{a['sequence']}", f"bundle sha256 {a['bundle_sha256']}"],
            ["Record sha256", a["record_sha256"]],
            ["Previous record sha256", a["previous_sha256"]],
        ]
    return [Heading("Evidence"), Grid(rows, (45, 130))]


def _audit(doc: dict[str, Any]) -> list[Block]:
    rows = [["Time", "Action", "Who"]] + [
        [utc_text(e["at"]), e["action"], f"{e['actor']} ({e['role']})"] for e in doc["events"]
    ]
    return [Heading("Audit trail"), Grid(rows, (60, 40, 75))]


# --- the blocks, as a PDF -----------------------------------------------------------------------


def story_pdf(blocks: list[Block], *, title: str) -> bytes:
    """The blocks laid out on A4 pages (17 mm side margins, 15 mm top and bottom), as PDF bytes."""
    # seam: reportlab is an optional heavy import (about 0.6 s); only a PDF download loads it
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.lib.units import mm
    from reportlab.platypus import SimpleDocTemplate

    styles = getSampleStyleSheet()
    styles.add(styles["BodyText"].clone("small", fontSize=8, leading=10))
    story = [flowable for block in blocks for flowable in _flowables(block, styles)]
    buffer = io.BytesIO()
    pdf = SimpleDocTemplate(
        buffer,
        pagesize=A4,
        title=title,
        author="specreview",
        leftMargin=17 * mm,
        rightMargin=17 * mm,
        topMargin=15 * mm,
        bottomMargin=15 * mm,
    )
    pdf.build(story)
    return buffer.getvalue()


def _flowables(block: Block, styles: StyleSheet1) -> list[Flowable]:
    # seam: reportlab is an optional heavy import (about 0.6 s); only a PDF download loads it
    from reportlab.lib.units import mm
    from reportlab.platypus import Paragraph, Spacer

    if isinstance(block, Heading):
        return [Paragraph(escape(block.text), styles[block.style])]
    if isinstance(block, Line):
        return [_line(block.text, styles[block.style])]
    if isinstance(block, TextBlock):
        return list(_text_paragraphs(block.label, block.text, styles["BodyText"]))
    if isinstance(block, Grid):
        return [_table(block, styles["small"])]
    return [Spacer(1, block.height_mm * mm)]


def _line(text: Any, style: ParagraphStyle) -> Paragraph:
    # seam: reportlab is an optional heavy import (about 0.6 s); only a PDF download loads it
    from reportlab.platypus import Paragraph

    return Paragraph(escape(str(text)).replace("\n", "<br/>"), style)


def _text_paragraphs(label: str, text: Any, style: ParagraphStyle) -> list[Paragraph]:
    """Free text as one paragraph per line, outside any table: a paragraph splits across pages,
    so no comment is too long to print. A "word" over 200 characters is cut every 40 (reportlab
    breaks one that long in quadratic time: a 200,000-character one took 20 s, cut 5 s)."""
    # seam: reportlab is an optional heavy import (about 0.6 s); only a PDF download loads it
    from reportlab.platypus import Paragraph

    text = _LONG_WORD.sub(lambda m: " ".join(textwrap.wrap(m.group(), 40)), str(text))
    lines = text.replace("\r\n", "\n").split("\n")
    first = Paragraph(f"<b>{escape(label)}</b> " + escape(lines[0]), style)
    return [first] + [Paragraph(escape(line), style) for line in lines[1:] if line.strip()]


def _table(grid: Grid, small: ParagraphStyle) -> Table:
    # seam: reportlab is an optional heavy import (about 0.6 s); only a PDF download loads it
    from reportlab.lib import colors
    from reportlab.lib.units import mm
    from reportlab.platypus import Table, TableStyle

    t = Table(
        [[_line(c, small) for c in r] for r in grid.rows],
        colWidths=[w * mm for w in grid.widths_mm],
        repeatRows=1 if grid.header else 0,
        splitInRow=1,  # a cell taller than a page (a long note) continues on the next one
    )
    style = [
        ("GRID", (0, 0), (-1, -1), 0.4, colors.HexColor("#98a2b3")),
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
    ]
    if grid.header:
        style.append(("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e4e7ec")))
    if grid.status_col is not None:
        col = grid.status_col
        for i, r in enumerate(grid.rows[1:], start=1):
            text = str(r[col])
            colour = (
                "#dcfae6" if text.startswith("PASS") else "#fee4e2" if text.startswith("FAIL") else "#f2f4f7"
            )
            style.append(("BACKGROUND", (col, i), (col, i), colors.HexColor(colour)))
    t.setStyle(TableStyle(style))
    return t
