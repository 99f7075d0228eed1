"""A worker process for one-machine use (the demo, `run_experiment --worker`).

Production runs workers as their own services (docker-compose.yml, docs/deploy.md); on the
embedded default nothing else would consume the filesystem broker, so the command that
needs work done starts one and stops it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings


def worker_argv(*, name: str, queues: str = "cpu,gpu") -> list[str]:
    """The command line of a one-at-a-time worker (solo pool, like a GPU worker) named ``name``."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.celery",
        "worker",
        "-Q",
        queues,
        "--pool",
        "solo",
        "--concurrency",
        "1",
        "--without-gossip",
        "--without-mingle",
        "--loglevel",
        "INFO",
        "-n",
        f"{name}@%h",
    ]


@contextlib.contextmanager
def embedded_worker(*, queues: str = "cpu,gpu", log_path: Path | None = None) -> Iterator[subprocess.Popen]:
    log_path = log_path or Path(settings.VAR_DIR) / "worker.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            worker_argv(name=f"embedded-{os.getpid()}", queues=queues),
            cwd=settings.BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 90
            while "ready." not in log_path.read_text(errors="replace"):
                if proc.poll() is not None:
                    raise RuntimeError(f"the worker exited at start-up; see {log_path}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the worker did not start within 90 s; see {log_path}")
                time.sleep(0.3)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
