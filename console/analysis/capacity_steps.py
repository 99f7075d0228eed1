"""A capacity-search step judged against its SLO, from the step run's stored results. The search
itself (``console.experiments.capacity_search``) sits below results and analysis: it calls this
through ``console.experiments.hooks``, where ``apps.py`` registers it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from console.analysis.comparison.capacity_stage import slo_evaluate
from console.analysis.metrics import requests_derive
from console.experiments.models import Run
from console.results.models import RequestResult

# RequestResult fields (or trace_request__ lookups) -> the columns ``requests_derive`` reads.
STEP_FIELDS = {
    "scheduled_s": "scheduled_s",
    "sent_s": "sent_s",
    "first_token_s": "first_token_s",
    "finish_s": "finish_s",
    "queue_s": "queue_s",
    "chunk_times": "chunk_times",
    "num_output_tokens": "num_output_tokens",
    "finish_reason": "finish_reason",
    "error": "error",
    "trace_request__traffic_class": "traffic_class",
}


def capacity_step_outcome(
    *, run: Run, slo: Mapping[str, Any], deadlines: Mapping[str, Any]
) -> dict[str, Any]:
    """The SLO evaluation of one finished step run (``slo_evaluate``: ``passed``, ``reasons``,
    attainment as a fraction, p95s in seconds), from its stored results."""
    rows = RequestResult.objects.filter(run_id=run.pk).values_list(*STEP_FIELDS)
    frame = pd.DataFrame.from_records(list(rows), columns=list(STEP_FIELDS.values()))
    for column in ("sent_s", "first_token_s", "finish_s", "queue_s"):
        frame[column] = frame[column].astype(float)
    frame["error"] = frame["error"].where(frame["error"].astype(bool), None)
    derived = requests_derive(frame, deadlines=deadlines)
    return slo_evaluate(derived, slo)
