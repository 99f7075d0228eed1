"""Where the demo's time went: a budget summed from what each run stored.

Pure functions over plain numbers (tested against hand-computed cases); the demo command reads
the rows and prints the lines. Every figure is seconds of wall-clock time.

Per run (all from stored fields, nothing timed twice):

- model load: the engine's own ``versions["load_s"]`` (the hf engine times its model loads);
- warm-up and setup: the rest of the run's life outside its replay window, i.e.
  ``finished_at - started_at - wall_s - load_s`` (warm-up requests, reading the trace, storing
  the results);
- prefill: time with a request in flight but none of them past its first token (the union of
  ``[sent, finish]`` minus the union of ``[first token, finish]``): on a one-at-a-time engine
  (hf) that is the sum of time-to-first-token work, queueing excluded;
- decode: the union of ``[first token, finish]`` intervals;
- idle: the replay window (``wall_s``) with no request in flight, i.e. waiting for arrivals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from console.experiments.models import Run
from console.results.models import RequestResult


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length (seconds) of the union of ``(start, end)`` intervals; empty or reversed
    intervals count nothing."""
    total = 0.0
    cur_start = cur_end = None
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if cur_end is None or start > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total


@dataclass
class RunBudget:
    """One run's seconds by phase (see the module docstring)."""
    model_load: float = 0.0
    warmup: float = 0.0
    prefill: float = 0.0
    decode: float = 0.0
    idle: float = 0.0

    @property
    def total(self) -> float:
        return self.model_load + self.warmup + self.prefill + self.decode + self.idle


def run_budget(
    *,
    span_s: float | None,
    wall_s: float | None,
    load_s: float | None,
    requests: Sequence[tuple[float | None, float | None, float | None]],
) -> RunBudget:
    """A run's budget. ``span_s``: claim to finish (seconds); ``wall_s``: the replay window;
    ``load_s``: the engine's model load; ``requests``: ``(sent_s, first_token_s, finish_s)``
    per request, seconds from the window's start (None where it never got there)."""
    in_flight = [(s, f) for s, _, f in requests if s is not None and f is not None]
    decoding = [(t, f) for _, t, f in requests if t is not None and f is not None]
    busy = union_length(in_flight)
    decode = min(union_length(decoding), busy)
    wall = max(wall_s or 0.0, busy)
    load = max(load_s or 0.0, 0.0)
    warmup = max((span_s or 0.0) - wall - load, 0.0) if span_s is not None else 0.0
    return RunBudget(model_load=load, warmup=warmup, prefill=busy - decode, decode=decode, idle=wall - busy)


@dataclass
class DemoBudget:
    """The whole demo: seconds before the command (install, migrate), fetching models, the
    runs' phases summed, and what is left of the wall-clock total (worker start, queueing
    between runs, the comparison, the policy and the decision)."""
    before_command: float | None
    fetch: float
    runs: RunBudget
    total: float
    run_count: int
    per_run: list[RunBudget] = field(default_factory=list)

    @property
    def other(self) -> float:
        return max(self.total - (self.before_command or 0.0) - self.fetch - self.runs.total, 0.0)


def budget_sum(budgets: Iterable[RunBudget]) -> RunBudget:
    out = RunBudget()
    for b in budgets:
        out.model_load += b.model_load
        out.warmup += b.warmup
        out.prefill += b.prefill
        out.decode += b.decode
        out.idle += b.idle
    return out


def _load_s(versions: Mapping[str, Any] | None) -> float | None:
    try:
        return float((versions or {}).get("load_s"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def budget_lines(budget: DemoBudget) -> list[str]:
    """The printed budget: one line per phase with seconds and share of the total."""
    total = budget.total or 1.0

    def line(label: str, seconds: float | None, note: str = "") -> str:
        if seconds is None:
            return f"  {label:<28}{'not measured':>12}  {note}".rstrip()
        return f"  {label:<28}{seconds:>10.0f} s{seconds / total:>6.0%}  {note}".rstrip()

    runs = budget.runs
    return [
        line(
            "install (before the demo)",
            budget.before_command,
            "venv, pip install, migrate"
            if budget.before_command is not None
            else "(make demo passes SPECREVIEW_DEMO_T0; run directly, it is not known)",
        ),
        line("model fetch", budget.fetch, "from PyPI packages; instant when cached"),
        line("model load", runs.model_load, f"summed over {budget.run_count} runs"),
        line("warm-up and setup", runs.warmup, "warm-up requests, storing results"),
        line("prefill", runs.prefill, "a request in flight, none past its first token"),
        line("decode", runs.decode, "generating tokens"),
        line("idle", runs.idle, "replay windows waiting for arrivals"),
        line("other", budget.other, "worker start, comparison, policy, decision"),
        f"  {'total':<28}{budget.total:>10.0f} s",
    ]


def experiment_budget(
    *, experiment: Any, before_command: float | None, fetch: float, total: float
) -> DemoBudget:
    """The budget of ``experiment``'s finished runs (read from the database)."""
    per_run = []
    for run in experiment.runs.filter(status=Run.Status.DONE).order_by("order"):
        span = (
            (run.finished_at - run.started_at).total_seconds() if run.finished_at and run.started_at else None
        )
        rows = RequestResult.objects.filter(run=run).values_list("sent_s", "first_token_s", "finish_s")
        per_run.append(
            run_budget(span_s=span, wall_s=run.wall_s, load_s=_load_s(run.versions), requests=list(rows))
        )
    return DemoBudget(
        before_command=before_command,
        fetch=fetch,
        runs=budget_sum(per_run),
        total=total,
        run_count=len(per_run),
        per_run=per_run,
    )
