"""An experiment's runs as rows: the matrix of some repeats in its interleaved order, then each arm
and repeat's first capacity-search step. Built when an experiment is defined
(``services.experiment_create``: every repeat) and for each repeat a run-until-decided experiment
adds (``until_decided.until_decided_continue``: one repeat), so both write the same runs."""

from __future__ import annotations

from django.conf import settings

from console.experiments.capacity_search import capacity_first_runs
from console.experiments.matrix import LoadLevel, OutputBucket, matrix_order
from console.experiments.models import Arm, Experiment, Run


def run_queue(*, engine: str, engine_args: dict) -> str:
    """``gpu`` for engines on an accelerator, ``cpu`` otherwise (the hf engine's default); the
    names are the settings' (``CPU_QUEUE``, ``GPU_QUEUE``)."""
    cpu, gpu = settings.CPU_QUEUE, settings.GPU_QUEUE
    device = str(engine_args.get("device", "")).lower()
    if engine == "vllm":
        return cpu if device == "cpu" else gpu
    if engine == "hf":
        return gpu if device.startswith("cuda") else cpu
    return cpu


def repeats_runs(
    *,
    experiment: Experiment,
    arm_rows: list[Arm],
    levels: list[LoadLevel],
    buckets: list[OutputBucket],
    repeats: range,
    first_order: int,
) -> list[Run]:
    """Unsaved runs of the repeats in ``repeats`` (0-based indices), numbered from
    ``first_order``: the matrix in its interleaved order (``matrix.matrix_order``; its arm order
    alternates block by block across repeats, so a repeat added later runs its arms in the order
    it would have had in the first matrix), then, with a capacity search, each arm and repeat's
    first search step after it."""
    bucket_labels = [b.label for b in buckets] or [""]
    engine = experiment.engine
    order = matrix_order(
        arms=len(arm_rows), loads=len(levels), repeats=repeats.stop, buckets=len(bucket_labels)
    )
    runs = [
        Run(
            experiment=experiment,
            arm=arm_rows[a],
            load_label=levels[lv].label,
            rate_multiplier=levels[lv].rate_multiplier,
            concurrency_cap=levels[lv].concurrency,
            output_bucket=bucket_labels[b],
            repeat=r,
            order=first_order + i,
            queue=run_queue(engine=engine, engine_args=arm_rows[a].config.engine_args),
            config_hash=arm_rows[a].config.content_hash,
        )
        for i, (a, lv, r, b) in enumerate(cell for cell in order if cell[2] in repeats)
    ]
    if experiment.capacity_search:
        steps = capacity_first_runs(
            experiment=experiment,
            arms=arm_rows,
            repeats=repeats.stop,
            first_order=0,
            queue_of=lambda arm: run_queue(engine=engine, engine_args=arm.config.engine_args),
        )
        steps = [s for s in steps if s.repeat in repeats]
        for i, step in enumerate(steps):
            step.order = first_order + len(runs) + i
        runs += steps
    return runs
