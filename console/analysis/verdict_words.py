"""The comparison's answer in plain words, for the top of its page: per candidate, what the
declared primary latency endpoint of the promised class shows at each load (better or worse
beyond the noise floor, Holm-adjusted; not distinguishable; or not measured, and what would
measure it). It reads the primary rows the page already shows; it decides nothing the gate does.

A load where the baseline was past saturation (``comparison.saturation``) is said beside every
verdict there: an overloaded baseline's A/A floor is wide, so "not distinguishable" at that load
says more about the baseline than about the candidate."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from console import numbers, words
from console.analysis.comparison.schema import SaturationRow


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
    saturation: str | None = None  # the baseline past saturation at this load, in words


@dataclass(frozen=True)
class CandidateVerdict:
    arm: str
    tone: str  # "better" (every load), "worse" (some load), "open" (none worse, some not decided)
    sentence: str


def saturation_sentence(row: SaturationRow) -> str:
    """A past-saturation row in words: "baseline past saturation at 2x: completed 1.20 req/s of
    2.00 req/s arriving; waits grew from 100 ms to 3.40 s" (rates in requests/s, waits the medians
    of the first and last thirds of the requests by arrival)."""
    who = "baseline" if row.is_baseline else row.arm
    rates = f"completed {numbers.show(row.completed_rps, 'req/s')} of {numbers.show(row.arrival_rps, 'req/s')} arriving"
    w0, w1 = numbers.duration(row.wait_first_s), numbers.duration(row.wait_last_s)
    grew = row.wait_first_s is not None and row.wait_last_s is not None and row.wait_last_s > row.wait_first_s
    waits = f"waits grew from {w0} to {w1}" if grew else f"waits went from {w0} to {w1}"
    return f"{who} past saturation at {row.load}: {rates}; {waits}"


def saturated_loads(rows: Sequence[SaturationRow] | None) -> dict[str, str]:
    """Load -> :func:`saturation_sentence` for every load where the baseline was past saturation
    (a comparison stored before the check has none)."""
    return {r.load: saturation_sentence(r) for r in rows or () if r.is_baseline and r.saturated}


def verdict_lines(
    primary: Sequence[PrimaryView],
    *,
    metric: str,
    stat: str,
    promised: str,
    saturated: Mapping[str, str] | None = None,
) -> list[CandidateVerdict]:
    """One sentence per candidate arm over its primary-endpoint rows (``metric`` ``stat``);
    ``saturated`` (:func:`saturated_loads`) says where the baseline was past saturation."""
    saturated = saturated or {}
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
            elif kind == "not-distinguishable" and r.load in saturated:
                parts.append(
                    f"not distinguishable from the baseline at {r.load}, limited by the overloaded baseline "
                    f"({saturated[r.load]}); compare at a load the baseline sustains"
                )
            elif kind == "not-distinguishable":
                parts.append(f"not distinguishable from the baseline at {r.load}")
            else:
                parts.append(f"not measured at {r.load}: {r.reason or 'no data'}")
            if kind != "not-distinguishable" and r.load in saturated:
                parts[-1] += f" ({saturated[r.load]})"
        if kinds == {"better"}:
            tone, lead = "better", f"{arm} improves {name} beyond the noise floor at every load"
        elif "worse" in kinds:
            tone, lead = "worse", f"{arm} makes {name} worse at some load"
        else:
            tone, lead = "open", f"{arm} shows no clear benefit on {name} yet"
        out.append(CandidateVerdict(arm=arm, tone=tone, sentence=f"{lead}: " + "; ".join(parts) + "."))
    return out
