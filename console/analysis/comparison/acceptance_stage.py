"""The comparison's acceptance tables (per task, traffic class, draft position and output
position) and its multi-turn session tables."""

from __future__ import annotations

from typing import Any

import pandas as pd

from console.analysis.acceptance import acceptance_aggregate, acceptance_by_position
from console.analysis.comparison.records import records
from console.analysis.sessions import sessions_aggregate, turns_aggregate


def acceptance_tables(steps: pd.DataFrame, request_steps: pd.DataFrame, derived: pd.DataFrame) -> dict[str, Any]:
    """Acceptance per arm x load and task, traffic class, draft position and output-position
    bucket (``metrics.acceptance_aggregate``, ``acceptance_by_position``)."""
    return {
        "by_task": records(acceptance_aggregate(request_steps, derived, by=["arm", "load", "task"])),
        "by_traffic_class": records(acceptance_aggregate(request_steps, derived, by=["arm", "load", "traffic_class"])),
        "by_position": records(acceptance_by_position(steps, derived, by=["arm", "load"])),
        "by_task_position": records(acceptance_by_position(steps, derived, by=["arm", "load", "task"])),
        "by_output_position": records(acceptance_aggregate(steps, derived, by=["arm", "load", "position_bucket"])),
        "by_task_output_position": records(
            acceptance_aggregate(steps, derived, by=["arm", "load", "task", "position_bucket"])
        ),
    }


def session_tables(derived: pd.DataFrame) -> dict[str, Any]:
    """Sessions per arm x load and per turn (``metrics.sessions_aggregate``, ``turns_aggregate``)."""
    return {
        "by_arm_load": records(sessions_aggregate(derived, by=["arm", "load"])),
        "by_turn": records(turns_aggregate(derived, by=["arm", "load"])),
    }
