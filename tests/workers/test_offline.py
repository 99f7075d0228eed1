"""Hub access is switched off in one place (workers/offline.py) that every entry point reaches:
the settings (manage.py, web), the Celery app a worker loads (`celery -A workers.celery`), its
tasks once Django is set up, an engine or the catalog imported on its own (bench/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import os; {imports}; print(os.environ.get('HF_HUB_OFFLINE'), os.environ.get('TRANSFORMERS_OFFLINE'))"


def _probe(imports: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(imports=imports)],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "console.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "imports",
    [
        "import django; django.setup()",
        "import workers.engines.hf",
        "import workers.catalog",
        "import workers.celery",
        # the tasks module reads the console's services at import: a worker reaches it after setup
        "import django; django.setup(); import workers.tasks",
    ],
)
def test_every_entry_point_runs_offline(imports):
    assert _probe(imports) == "1 1"


def test_an_operators_explicit_value_wins():
    assert _probe("import workers.engines.hf", HF_HUB_OFFLINE="0") == "0 1"
