"""The ``workers.ping`` task's row: a worker that can run runs proves it reached the database."""

from __future__ import annotations

import socket

from console.experiments.models import WorkerHeartbeat


def worker_heartbeat_record(*, note: str) -> WorkerHeartbeat:
    """Store a heartbeat from this host with ``note`` (what the caller waits to see)."""
    return WorkerHeartbeat.objects.create(note=note, hostname=socket.gethostname())
