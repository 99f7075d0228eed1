"""The comparison's answer in plain words, for the top of its page: per candidate, what the
declared primary latency endpoint of the promised class shows at each load (better or worse
beyond the noise floor, Holm-adjusted; not distinguishable; or not measured, and what would
measure it). It reads the primary rows the page already shows; it decides nothing the gate does."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from console import numbers, words


@dataclass(frozen=True)
class PrimaryView:
    """A primary endpoint's row as the comparison page shows it (``verdict`` and ``floor`` as in a
    headline cell): built by ``comparison_page``, read here."""

    arm: str
    load: str
    metric: str
    stat: str
    name: str  # the metric and statistic in words ("TPOT p95")
    measured: bool
    reason: str | None
    p_holm: float | None
    verdict: str | None
    floor: str | None
    base_text: str
    cand_text: str
    delta_text: str
    interval_text: str


@dataclass(frozen=True)
class CandidateVerdict:
    arm: str
    tone: str  # "better" (every load), "worse" (some load), "open" (none worse, some not decided)
    sentence: str


def verdict_lines(primary: Sequence[PrimaryView], *, metric: str, stat: str, promised: str) -> list[CandidateVerdict]:
    """One sentence per candidate arm over its primary-endpoint rows (``metric`` ``stat``)."""
    by_arm: dict[str, list[PrimaryView]] = defaultdict(list)
    for row in primary:
        if row.metric == metric and row.stat == stat:
            by_arm[row.arm].append(row)
    out = []
    name = f"{promised} {words.metric_words(metric, stat)}"
    for arm, rows in by_arm.items():
        parts, kinds = [], set()
        for r in rows:
            kind = r.verdict if r.measured and r.verdict else "not-measured"
            kinds.add(kind)
            if kind in ("better", "worse"):
                p = f", Holm p {numbers.p_value(r.p_holm)}" if r.p_holm is not None else ""
                parts.append(f"{kind} at {r.load} ({r.delta_text} {r.interval_text}{p})")
            elif kind == "not-distinguishable":
                parts.append(f"not distinguishable from the baseline at {r.load}")
            else:
                parts.append(f"not measured at {r.load}: {r.reason or 'no data'}")
        if kinds == {"better"}:
            tone, lead = "better", f"{arm} improves {name} beyond the noise floor at every load"
        elif "worse" in kinds:
            tone, lead = "worse", f"{arm} makes {name} worse at some load"
        else:
            tone, lead = "open", f"{arm} shows no clear benefit on {name} yet"
        out.append(CandidateVerdict(arm=arm, tone=tone, sentence=f"{lead}: " + "; ".join(parts) + "."))
    return out
