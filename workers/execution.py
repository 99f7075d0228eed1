"""Execute one run: claim it, start its engine, replay the trace, store what a user saw.

Called by the thin ``execute_run`` task. Idempotent: the claim is a conditional UPDATE
(queued -> running), and a run's old rows are deleted before new ones are written, so a
retried run replaces its results and never mixes with them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import traceback

from django.db import connection, transaction
from django.utils import timezone

from console.analysis.models import RequestResult, RunSummary, RunTelemetry
from console.experiments.models import Experiment, Run
from console.experiments.services import experiment_status_refresh, run_claim, run_progress_record
from console.traces.models import TraceRequest
from workers.engines import EngineConfig, EngineError, EngineRequest, engine_create
from workers.hardware import hardware_describe
from workers.replay import RequestSpec, replay_run

log = logging.getLogger(__name__)
BULK_BATCH = 2000


def run_requests(*, experiment: Experiment) -> list[tuple[TraceRequest, EngineRequest]]:
    """The requests every arm replays: the same ids, arrivals, prompts, limits and seeds."""
    qs = TraceRequest.objects.filter(trace_id=experiment.trace_id).order_by("position")
    if experiment.split != "all":
        qs = qs.filter(split=experiment.split)
    out = []
    for tr in qs:
        max_tokens = tr.max_tokens
        if experiment.output_limit:
            max_tokens = min(max_tokens, experiment.output_limit)
        greedy = experiment.sampling == "greedy"
        out.append(
            (
                tr,
                EngineRequest(
                    request_id=tr.request_id,
                    max_tokens=max_tokens,
                    prompt=tr.prompt,
                    messages=tr.messages,
                    temperature=0.0 if greedy or tr.temperature is None else float(tr.temperature),
                    top_p=1.0 if greedy or tr.top_p is None else float(tr.top_p),
                    seed=tr.seed,
                    response_format=tr.response_format,
                    tools=tr.tools,
                ),
            )
        )
    return out


def _validity(record_text: str, tr: TraceRequest) -> dict:
    from console.analysis.quality import response_format_check, tool_call_check

    fmt = response_format_check(record_text, tr.response_format)
    tool = tool_call_check(record_text, tr.tools)
    return {
        "json_valid": fmt["json_valid"],
        "schema_valid": fmt["schema_valid"],
        "tool_call_valid": tool["tool_valid"],
    }


def run_execute(*, run_id: int) -> str:
    """Run one arm at one load level. Returns the final status ("done", "failed", "cancelled",
    or "skipped" when there was nothing to claim). Raises EngineError only when transient, so
    the task can retry after the run was put back to ``queued``."""
    if not run_claim(run_id=run_id, worker=socket.gethostname()):
        return "skipped"
    run = Run.objects.select_related("experiment", "arm__config").get(pk=run_id)
    experiment = run.experiment
    config = run.arm.config
    _clear_results(run_id)
    pairs = run_requests(experiment=experiment)
    Run.objects.filter(pk=run_id).update(
        progress_total=len(pairs), hardware=hardware_describe(), config_hash=config.content_hash
    )
    engine = None
    try:
        engine = engine_create(config.engine)
        engine.start(
            EngineConfig(
                engine=config.engine,
                target_model=config.target_model,
                engine_args=config.engine_args,
                speculative_config=config.speculative_config,
            )
        )
        Run.objects.filter(pk=run_id).update(versions=engine.versions())
        by_key = {tr.pk: tr for tr, _ in pairs}
        specs = [RequestSpec(request=req, arrival_s=tr.arrival_s, key=tr.pk) for tr, req in pairs]
        stop_requested = {"flag": False}

        # Both run in the replay's worker threads: each thread has its own database connection,
        # closed after use so a long replay does not leave connections behind.
        def progress(done: int, total: int) -> None:
            try:
                stop_requested["flag"] = run_progress_record(run_id=run_id, done=done, total=total)
            finally:
                connection.close()

        def cancel() -> bool:
            if stop_requested["flag"]:
                return True
            try:
                return Run.objects.filter(pk=run_id, cancel_requested=True).exists()
            finally:
                connection.close()

        result = asyncio.run(
            replay_run(
                engine=engine,
                specs=specs,
                rate_multiplier=run.rate_multiplier,
                concurrency_cap=run.concurrency_cap,
                warmup=experiment.warmup,
                progress=progress,
                cancel=cancel,
            )
        )
    except EngineError as exc:
        if exc.transient and run.attempt < 3:
            Run.objects.filter(pk=run_id, status=Run.Status.RUNNING).update(
                status=Run.Status.QUEUED, error=f"retrying: {exc}"
            )
            raise
        return _finish_failed(run_id, str(exc))
    except Exception as exc:  # the user must see why; the traceback goes to the worker log
        log.exception("run %s failed", run_id)
        return _finish_failed(run_id, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
    finally:
        if engine is not None:
            try:
                engine.stop()
            except Exception:
                log.exception("run %s: engine stop failed", run_id)

    if result.cancelled:
        _clear_results(run_id)
        Run.objects.filter(pk=run_id).update(status=Run.Status.CANCELLED, finished_at=timezone.now())
        experiment_status_refresh(experiment_id=experiment.pk)
        return "cancelled"

    with transaction.atomic():
        _clear_results(run_id)
        rows = []
        for record in result.records:
            tr = by_key[record.key]
            rows.append(
                RequestResult(
                    run_id=run_id,
                    trace_request_id=tr.pk,
                    **record.as_row(),
                    **_validity(record.output_text, tr),
                )
            )
        RequestResult.objects.bulk_create(rows, batch_size=BULK_BATCH)
        tele = result.telemetry or {}
        RunTelemetry.objects.create(
            run_id=run_id,
            peak_memory_bytes=tele.get("peak_rss_bytes") or tele.get("peak_memory_bytes"),
            gpu_peak_memory_bytes=tele.get("gpu_peak_memory_bytes"),
            mean_util=tele.get("mean_util"),
            energy_j=tele.get("energy_j"),
            cpu_time_s=tele.get("cpu_time_s"),
            counters=result.counters_delta,
            samples=tele.get("samples", []),
        )
        failed = sum(1 for r in result.records if r.error)
        Run.objects.filter(pk=run_id).update(
            status=Run.Status.DONE,
            finished_at=timezone.now(),
            wall_s=result.wall_s,
            progress_done=len(result.records),
            error=f"{failed} of {len(result.records)} requests failed" if failed else "",
        )
    experiment_status_refresh(experiment_id=experiment.pk)
    return "done"


def _clear_results(run_id: int) -> None:
    RequestResult.objects.filter(run_id=run_id).delete()
    RunTelemetry.objects.filter(run_id=run_id).delete()
    RunSummary.objects.filter(run_id=run_id).delete()


def _finish_failed(run_id: int, message: str) -> str:
    _clear_results(run_id)
    run = Run.objects.get(pk=run_id)
    Run.objects.filter(pk=run_id).update(
        status=Run.Status.FAILED, error=message[:4000], finished_at=timezone.now()
    )
    experiment_status_refresh(experiment_id=run.experiment_id)
    return "failed"


def run_fail_if_stuck(*, run_id: int, message: str) -> None:
    """Mark a run failed if it is still ``running`` (a worker lost it or a time limit hit)."""
    Run.objects.filter(pk=run_id, status=Run.Status.RUNNING).update(
        status=Run.Status.FAILED, error=message, finished_at=timezone.now()
    )
    run = Run.objects.filter(pk=run_id).first()
    if run:
        experiment_status_refresh(experiment_id=run.experiment_id)
