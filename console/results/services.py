"""Writes of what runs produced: a finished run's results stored (the one entry the worker calls),
discarded, and packed into one value per run."""

from __future__ import annotations

from typing import Any

from console.experiments.models import Experiment
from console.experiments.runs import run_finish
from console.results.frame_pack import frame_pack
from console.results.models import RequestResult, RunResultsPack, RunSummary, RunTelemetry
from console.results.sanitise import Sanitised, result_rows_sanitise
from console.results.selectors import ARRAY_FIELDS, RESULT_FIELDS, RESULTS_PACK_VERSION, stored_results_frame

BULK_BATCH = 2000  # result rows per INSERT


def results_store(
    *,
    run_id: int,
    token: str,
    rows: list[RequestResult],
    telemetry: dict[str, Any],
    wall_s: float,
    error: str = "",
) -> bool:
    """Store a finished run's results and mark it done, in one transaction, only while the
    claim ``token`` is held (``runs.run_finish``): a worker that lost it writes nothing. A
    rerun's rows replace the old ones. Then the run's derived data follows (its pack, its fit
    facts: ``console.experiments.hooks``) and its experiment's status is refreshed.

    ``rows`` are unsaved ``RequestResult`` objects; ``telemetry`` the ``RunTelemetry`` fields;
    ``wall_s`` the replay's wall time in seconds. What had to change for the rows to store (NUL
    bytes, over-long text, non-finite JSON numbers) is added to the run's ``error``. Returns
    False (nothing written) when the claim was lost.
    """
    sanitised = Sanitised()
    rows = result_rows_sanitise(rows=rows, sanitised=sanitised)
    telemetry = {k: sanitised.json(v, what="telemetry") for k, v in telemetry.items()}

    def write() -> int:
        results_clear(run_id=run_id)
        RequestResult.objects.bulk_create(rows, batch_size=BULK_BATCH)
        RunTelemetry.objects.create(run_id=run_id, **telemetry)
        return len(rows)

    note = sanitised.summary()
    return run_finish(
        run_id=run_id, token=token, store=write, wall_s=wall_s, error="; ".join(m for m in (error, note) if m)
    )


def results_clear(*, run_id: int) -> None:
    """Delete everything the run stored: its rows, telemetry, pack and cached summaries. The run
    lifecycle calls it (``hooks.run_results_discard``) when an attempt ends without results."""
    RunResultsPack.objects.filter(run_id=run_id).delete()
    RequestResult.objects.filter(run_id=run_id).delete()
    RunTelemetry.objects.filter(run_id=run_id).delete()
    RunSummary.objects.filter(run_id=run_id).delete()


def results_pack_store(*, run_id: int) -> int:
    """Pack a finished run's result rows into one value (``RunResultsPack``), so comparisons
    load the run in one read. Returns the number of rows packed. Called as each run finishes
    (``hooks.run_finished_notify``), before the comparison that follows the last run."""
    frame = stored_results_frame(run_ids=[run_id])
    top = int(frame["result_id"].max()) if len(frame) else None
    blob = frame_pack(frame, arrays={RESULT_FIELDS[f]: kind for f, kind in ARRAY_FIELDS.items()})
    RunResultsPack.objects.update_or_create(
        run_id=run_id,
        defaults={"version": RESULTS_PACK_VERSION, "n_rows": len(frame), "max_result_id": top, "data": blob},
    )
    return len(frame)


def results_packs_store(*, experiment: Experiment) -> int:
    """Pack every finished run of ``experiment`` that has no pack of the current version, as the
    worker does for each run as it ends: for experiments whose rows were stored some other way
    (the bench's synthetic experiment, tests). Returns the runs packed."""
    done = experiment.runs.filter(status="done").values_list("pk", flat=True)
    current = set(
        RunResultsPack.objects.filter(run_id__in=list(done), version=RESULTS_PACK_VERSION).values_list(
            "run_id", flat=True
        )
    )
    missing = [pk for pk in done if pk not in current]
    for pk in missing:
        results_pack_store(run_id=pk)
    return len(missing)
