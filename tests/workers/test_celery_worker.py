"""A real worker on the real broker runs a task and writes to the real database."""

from __future__ import annotations

import pytest

from tests.conftest import wait_for


@pytest.mark.worker
def test_it_runs_a_task_on_a_real_worker_and_writes_postgres(celery_worker_proc):
    from console.experiments.models import WorkerHeartbeat
    from workers.tasks import ping

    ping.apply_async(kwargs={"note": "hello from the test"}, queue="cpu")
    row = wait_for(
        lambda: WorkerHeartbeat.objects.filter(note="hello from the test").first(),
        timeout=60,
        what="heartbeat",
    )
    assert row.hostname
