"""Where each arm's memory figure came from: the worker process that ran the engine, a remote
server's registered telemetry, or nowhere (not measured).

An ``openai`` arm's engine runs on its server, so the replay worker's memory is the client's and
is never the arm's (``workers.replay.records.run_telemetry_row`` stores it apart); its memory is
the server's telemetry where the operator registered one. Pure pandas; no Django.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

IN_PROCESS = "the worker process (engine, models and replay client; GPU memory on GPU hosts)"
NOT_MEASURED = "not measured"


def memory_sources(runs: pd.DataFrame) -> dict[str, str]:
    """Per arm, the source of its runs' peak memory (several joined by "; " when runs differ).
    ``runs`` carries ``arm`` and ``spec_counters`` (each run's stored counters, or None)."""
    if runs.empty or "arm" not in runs:
        return {}
    out: dict[str, str] = {}
    counters = runs["spec_counters"] if "spec_counters" in runs else pd.Series([None] * len(runs), index=runs.index)
    for arm, group in counters.groupby(runs["arm"], sort=True):
        out[str(arm)] = "; ".join(sorted({_source(c) for c in group}))
    return out


def _source(counters: Any) -> str:
    if not isinstance(counters, dict) or "server_telemetry" not in counters:
        return IN_PROCESS
    server = counters["server_telemetry"] or {}
    if server.get("source") and server.get("peak_memory_bytes") is not None:
        return str(server["source"])
    why = server.get("reason") or (f"{server['source']} gave no memory reading" if server.get("source") else "")
    return f"{NOT_MEASURED}: {why or 'the server names no telemetry'}"
