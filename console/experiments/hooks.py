"""Upward seams of a run's life (``runs.py``, ``capacity_search.py``): what the apps above
experiments do when a run's stored results are discarded, when a run has finished, and how a
finished capacity-search step is judged against its SLO.

Seam: experiments sits below results and analysis (``.importlinter``: data flows one way), yet
the run lifecycle is what knows when a run's stored results must go (a failed, cancelled or lost
attempt, or a rerun replacing them), when a finished run's derived data is due (its results
pack, its fit facts), and when a capacity search needs the SLO outcome of a finished step (read
from its results with analysis's metrics). So the apps above register callables here from their
``AppConfig.ready()`` (the results app: the discard and the pack; the analysis app: the
fit facts and the step outcome), and experiments calls them without importing those apps.
Callbacks run in the order they were registered, which is ``INSTALLED_APPS`` order: results
before analysis, so a run is packed before its fit facts are read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from console.experiments.models import Run

log = logging.getLogger(__name__)

RunCallback = Callable[..., object]  # called as callback(run_id=...)


@dataclass(frozen=True)
class _Derived:
    callback: RunCallback
    failure: str  # logged with the run's id when the callback raises


_discard: list[RunCallback] = []
_finished: list[_Derived] = []
# called as outcome(run=..., slo=..., deadlines=...); one, registered by the analysis app
_step_outcome: list[Callable[..., dict[str, Any]]] = []


def results_discard_register(callback: RunCallback) -> None:
    """``callback(run_id=...)`` deletes what the run's attempt stored. Registered once."""
    if callback not in _discard:
        _discard.append(callback)


def run_finished_register(callback: RunCallback, *, failure: str) -> None:
    """``callback(run_id=...)`` stores data derived from a finished run's results; ``failure``
    is the log line when it raises ("could not pack its results"). Registered once."""
    if all(d.callback is not callback for d in _finished):
        _finished.append(_Derived(callback, failure))


def run_results_discard(*, run_id: int) -> None:
    """Delete every result the run's attempt stored. Called inside the lifecycle's transaction;
    an error propagates, so the run's status and its results change together or not at all."""
    for callback in _discard:
        callback(run_id=run_id)


def run_finished_notify(*, run_id: int) -> None:
    """Tell the apps above that the run's results are stored and committed. What they derive can
    be derived again later (the comparison task recomputes what is missing), so an error is
    logged and the next callback still runs."""
    for derived in _finished:
        try:
            derived.callback(run_id=run_id)
        except Exception:  # derived data: see the docstring
            log.exception("run %s: %s", run_id, derived.failure)


def capacity_outcome_register(outcome: Callable[..., dict[str, Any]]) -> None:
    """``outcome(run=..., slo=..., deadlines=...)`` judges one finished capacity-search step
    against the search's SLO from its stored results. One evaluator; a second replaces it."""
    _step_outcome[:] = [outcome]


def capacity_step_outcome(
    *, run: Run, slo: Mapping[str, Any], deadlines: Mapping[str, Any]
) -> dict[str, Any]:
    """The SLO evaluation of one finished step run: ``{"passed": bool, "reasons": [...], ...}``
    (the analysis app's ``capacity_stage.slo_evaluate``; times in seconds)."""
    if not _step_outcome:
        raise RuntimeError(
            "no capacity-step evaluator registered (the analysis app registers it when it is installed)"
        )
    return _step_outcome[0](run=run, slo=slo, deadlines=deadlines)
