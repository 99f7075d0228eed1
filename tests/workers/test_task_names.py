"""A snapshot of the Celery task names the worker registers. Queued messages, the beat schedule,
the routes and any worker still running an older release address tasks by these names: renaming
or dropping one is a deliberate change that updates this list (and says so in the release)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from workers.celery import app

ROOT = Path(__file__).resolve().parents[2]

TASK_NAMES = [
    "workers.compute_comparison",
    "workers.execute_run",
    "workers.notify",
    "workers.ping",
    "workers.raw_text_purge",
    "workers.rollouts_evaluate",
    "workers.runs_reap",
]

# What a worker process does at start-up (django.setup, then the app's default modules and the
# autodiscovered tasks modules), in a fresh interpreter so no test's imports add to it.
PROBE = """
import json, django
django.setup()
from workers.celery import app
app.loader.import_default_modules()
print(json.dumps(sorted(app.tasks.keys())))
"""


def _registered() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_worker_registers_exactly_these_task_names():
    names = _registered()
    assert "celery.chord_unlock" in names  # the probe saw a finalised app, not an empty one
    assert sorted(n for n in names if not n.startswith("celery.")) == TASK_NAMES


def test_the_beat_schedule_and_the_routes_name_registered_tasks():
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    routed = set(app.conf.task_routes or {})
    assert scheduled and routed
    assert scheduled | routed <= set(TASK_NAMES)
