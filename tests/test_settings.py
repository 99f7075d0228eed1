"""Bad settings stop start-up with a message naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _start(env_overrides: dict[str, str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, **env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "name,value",
    [
        ("DEBUG", "maybe"),
        ("DATABASE_URL", "not a url"),
        ("DATABASE_URL", "mysql://root@localhost/x"),
        ("DATABASE_URL", "postgres://postgres@127.0.0.1:5432"),
        ("CELERY_BROKER_URL", "http://example"),
        ("SPECREVIEW_TRACE_MAX_BYTES", "lots"),
        ("SECRET_KEY_FILE", "/nonexistent/secret"),
    ],
)
def test_it_refuses_to_start_with_a_bad_setting(name, value):
    result = _start({name: value})
    assert result.returncode != 0
    assert name in result.stderr, result.stderr


def test_it_starts_on_the_embedded_default_without_services(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env["SPECREVIEW_VAR_DIR"] = str(tmp_path)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.DATABASES['default']['ENGINE'], settings.CELERY_BROKER_URL)",
        ],
        cwd=ROOT,
        env=dict(env, DJANGO_SETTINGS_MODULE="console.settings"),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "sqlite3" in result.stdout and "filesystem://" in result.stdout
    assert (tmp_path / "secret_key").exists()
