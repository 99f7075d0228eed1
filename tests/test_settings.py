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
        ("SPECREVIEW_OPENAI_SERVERS", "prod=ftp://h/v1"),
        ("SPECREVIEW_OPENAI_SERVERS", '{"prod": {"url": "http://h/v1", "credential": "nowhere"}}'),
        ("SPECREVIEW_OPENAI_CREDENTIALS", "prod-key=not a variable"),
        ("SPECREVIEW_APPROVER_MAY_SIGN_OWN", "true"),  # removed: separation of duties has no switch
        ("SPECREVIEW_TRUSTED_PROXIES", "10.0.0.0/8,proxy.internal"),
        ("SPECREVIEW_RAW_TEXT_RETENTION_DAYS", "a year"),
        ("SPECREVIEW_RAW_TEXT_RETENTION_DAYS", "0"),
        ("SPECREVIEW_WEBHOOK_URLS", "file:///etc/passwd"),
        ("SPECREVIEW_WEBHOOK_URLS", "https://hooks.example.org/x"),  # without the secret that signs
        ("SPECREVIEW_NOTIFY_RETRIES", "-1"),
        ("SPECREVIEW_APPROVALS_REQUIRED", "0"),
        ("SPECREVIEW_APPROVALS_REQUIRED", "11"),
        ("SPECREVIEW_APPROVALS_REQUIRED", "two"),
    ],
)
def test_it_refuses_to_start_with_a_bad_setting(name, value):
    result = _start({name: value})
    assert result.returncode != 0
    assert name in result.stderr, result.stderr


def _settings_print(env: dict[str, str], *expressions: str) -> subprocess.CompletedProcess:
    """Print ``expressions`` over ``settings`` in a fresh process started with ``env``."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            f"print({', '.join(expressions)})",
        ],
        cwd=ROOT,
        env=dict(env, DJANGO_SETTINGS_MODULE="console.settings"),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_starts_on_the_embedded_default_without_services(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env["SPECREVIEW_VAR_DIR"] = str(tmp_path)
    result = _settings_print(env, "settings.DATABASES['default']['ENGINE']", "settings.CELERY_BROKER_URL")
    assert result.returncode == 0, result.stderr
    assert "sqlite3" in result.stdout and "filesystem://" in result.stdout
    assert (tmp_path / "secret_key").exists()


def test_it_keeps_redis_messages_invisible_for_longer_than_the_longest_run():
    env = dict(os.environ, CELERY_BROKER_URL="redis://127.0.0.1:6379/0", SPECREVIEW_RUN_TIME_LIMIT="90000")
    result = _settings_print(
        env,
        "settings.CELERY_BROKER_TRANSPORT_OPTIONS['visibility_timeout']",
        "settings.CELERY_TASK_TIME_LIMIT",
    )
    assert result.returncode == 0, result.stderr
    visibility, limit = map(int, result.stdout.split())
    assert limit == 90000 and visibility > limit


def test_it_refuses_a_staleness_that_would_reap_live_runs():
    result = _start({"SPECREVIEW_RUN_HEARTBEAT_S": "30", "SPECREVIEW_RUN_STALE_AFTER_S": "40"})
    assert result.returncode != 0
    assert "SPECREVIEW_RUN_STALE_AFTER_S" in result.stderr, result.stderr


def test_it_reads_registered_servers_and_credentials_as_references(monkeypatch):
    from console.env import envcredentials, envopenai_servers

    monkeypatch.setenv("SR_CREDS", "prod-key=PROD_VLLM_KEY, file-key=@/run/secrets/vllm")
    monkeypatch.setenv(
        "SR_SERVERS",
        '{"prod-vllm": {"url": "https://vllm.internal:8000/v1/", "credential": "prod-key"},'
        ' "local": "http://127.0.0.1:8000/v1"}',
    )
    credentials = envcredentials("SR_CREDS")
    assert credentials == {"prod-key": {"env": "PROD_VLLM_KEY"}, "file-key": {"file": "/run/secrets/vllm"}}
    assert envopenai_servers("SR_SERVERS", credentials=credentials) == {
        "prod-vllm": {"url": "https://vllm.internal:8000/v1", "credential": "prod-key"},
        "local": {"url": "http://127.0.0.1:8000/v1", "credential": ""},
    }
    monkeypatch.setenv("SR_SERVERS", "a=http://10.0.0.5:8000/v1, b=https://b.internal/v1")
    assert envopenai_servers("SR_SERVERS", credentials={}) == {
        "a": {"url": "http://10.0.0.5:8000/v1", "credential": ""},
        "b": {"url": "https://b.internal/v1", "credential": ""},
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"p": "ftp://h/v1"}', "needs an http\\(s\\) URL"),
        ('{"p": "http://user:pw@h/v1"}', "no user, password"),
        ('{"p": {"url": "http://h/v1", "api_key": "x"}}', "must be a URL or"),
        ('["http://h/v1"]', "must be a JSON object"),
    ],
)
def test_it_refuses_a_server_registry_it_cannot_trust(monkeypatch, value, message):
    from console.env import SettingsError, envopenai_servers

    monkeypatch.setenv("SR_SERVERS", value)
    with pytest.raises(SettingsError, match=rf"SR_SERVERS: .*{message}|SR_SERVERS {message}"):
        envopenai_servers("SR_SERVERS", credentials={})
