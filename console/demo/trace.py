"""Step 2: the demo trace shipped in the repo, imported (or its first requests only)."""

from __future__ import annotations

import io
from pathlib import Path

from console.traces.models import Trace
from console.traces.services import DEMO_TRACE_NAME, DEMO_TRACE_PATH, trace_import, trace_import_demo


def demo_trace_import(*, uploaded_by, limit_requests: int | None, team=None) -> Trace:
    """The whole demo trace, or a trace of its first ``limit_requests`` requests, owned by ``team``."""
    if not limit_requests:
        return trace_import_demo(uploaded_by=uploaded_by, team=team).trace
    lines = Path(DEMO_TRACE_PATH).read_bytes().splitlines(keepends=True)[:limit_requests]
    return trace_import(
        file=io.BytesIO(b"".join(lines)),
        name=f"{DEMO_TRACE_NAME} (first {limit_requests})",
        uploaded_by=uploaded_by,
        filename=Path(DEMO_TRACE_PATH).name,
        seed=0,
        team=team,
    ).trace
