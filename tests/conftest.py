"""Shared fixtures: named users per role, and a real Celery worker on the real broker."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("SPECREVIEW_SHARED_DATA", ROOT.parent / "shared" / "data"))
PASSWORD = "correct-horse-battery"


def _broker_per_xdist_worker() -> None:
    """Under pytest-xdist each test process gets its own Redis database (15, 14, ... from the
    configured one down): a test that purges the queue or starts a worker must not take another
    process's messages. Postgres needs nothing: pytest-django names each process's test database
    (``test_specreview_gw0``, ...). The workers a test starts inherit the URL (``_worker_env``)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    from urllib.parse import urlsplit, urlunsplit

    from django.conf import settings

    parts = urlsplit(settings.CELERY_BROKER_URL)
    if parts.scheme not in ("redis", "rediss"):
        return
    base = int(parts.path.strip("/") or 0)
    db = base - int(worker[2:])
    if db < 0:
        raise RuntimeError(f"too many xdist workers for Redis databases below {base}: {worker}")
    url = urlunsplit(parts._replace(path=f"/{db}"))
    settings.CELERY_BROKER_URL = url
    # Celery's app reads CELERY_BROKER_URL from the environment before its configuration.
    os.environ["CELERY_BROKER_URL"] = url


_broker_per_xdist_worker()


@pytest.fixture(autouse=True, scope="session")
def _static_collected():
    """Pages name the collected, content-hashed static files (CompressedManifestStaticFilesStorage):
    collect them once per session when a source is newer than the manifest (the xdist processes
    take turns on a lock; the second finds them current)."""
    from console.static_files import static_collect_if_stale

    static_collect_if_stale()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database, which Django empties with TRUNCATE after each transactional test: on
    PostgreSQL the decision tables refuse TRUNCATE (migration decisions 0004) unless a superuser
    sets ``specreview.allow_truncate``; set here on the test database only (new connections) and
    on the open one. tests/decisions/test_probe_audit.py turns it off to check the guard."""
    from django.db import connection

    with django_db_blocker.unblock():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                name = connection.ops.quote_name(connection.settings_dict["NAME"])
                cursor.execute(f"ALTER DATABASE {name} SET specreview.allow_truncate = 'on'")
                cursor.execute("SET specreview.allow_truncate = 'on'")


@pytest.fixture(autouse=True)
def _cache_cleared():
    """Each test starts with an empty cache: login and token throttling counters live there."""
    from django.core.cache import cache

    cache.clear()
    yield


@pytest.fixture
def shared_data() -> Path:
    assert SHARED_DATA.is_dir(), f"shared data not found at {SHARED_DATA} (set SPECREVIEW_SHARED_DATA)"
    return SHARED_DATA


@pytest.fixture
def engineer(db):
    from console.accounts.services import user_create

    return user_create(username="erin-engineer", password=PASSWORD, role="engineer")


@pytest.fixture
def approver(db):
    from console.accounts.services import user_create

    return user_create(username="alex-approver", password=PASSWORD, role="approver")


@pytest.fixture
def second_approver(db):
    from console.accounts.services import user_create

    return user_create(username="sam-approver", password=PASSWORD, role="approver")


@pytest.fixture
def viewer(db):
    from console.accounts.services import user_create

    return user_create(username="val-viewer", password=PASSWORD, role="viewer")


def _client_for(user):
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def engineer_client(engineer):
    return _client_for(engineer)


@pytest.fixture
def approver_client(approver):
    return _client_for(approver)


@pytest.fixture
def viewer_client(viewer):
    return _client_for(viewer)


@pytest.fixture
def api_token_for():
    from console.accounts.scopes import SCOPES
    from console.accounts.services import api_token_create

    def make(user, scopes=SCOPES) -> dict:
        # Every scope by default: a test about roles is not a test about token scopes.
        return {"HTTP_AUTHORIZATION": f"Bearer {api_token_create(user=user, scopes=scopes)}"}

    return make


@pytest.fixture
def wsgi_app(db):
    """The project's WSGI handler, called in-process inside the test's transaction."""
    from django.core.signals import request_started
    from django.core.wsgi import get_wsgi_application
    from django.db import close_old_connections

    # The handler closes "old" connections at each request start; inside the test's transaction
    # that would close the test's own connection (Django's test client disconnects it likewise).
    request_started.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        request_started.connect(close_old_connections)


@pytest.fixture
def openai_register(settings):
    """Register a local server (and optionally its credential) for one test, the way an
    operator sets SPECREVIEW_OPENAI_SERVERS / SPECREVIEW_OPENAI_CREDENTIALS. Returns the
    server's name; a worker started afterwards in the test sees the same registry."""
    servers = dict(settings.SPECREVIEW_OPENAI_SERVERS)
    credentials = dict(settings.SPECREVIEW_OPENAI_CREDENTIALS)

    def register(url: str, *, name: str = "test", credential_env: str | None = None) -> str:
        credential = ""
        if credential_env:
            credential = f"{name}-key"
            credentials[credential] = {"env": credential_env}
            settings.SPECREVIEW_OPENAI_CREDENTIALS = dict(credentials)
        servers[name] = {"url": url.rstrip("/"), "credential": credential}
        settings.SPECREVIEW_OPENAI_SERVERS = dict(servers)
        return name

    return register


def _worker_env() -> dict:
    from django.conf import settings
    from django.db import connection

    db = settings.DATABASES["default"]
    env = dict(os.environ)
    if db["ENGINE"].endswith("postgresql"):
        user = db.get("USER") or "postgres"
        host = db.get("HOST") or "127.0.0.1"
        port = db.get("PORT") or 5432
        env["DATABASE_URL"] = f"postgres://{user}@{host}:{port}/{connection.settings_dict['NAME']}"
    else:
        env["DATABASE_URL"] = f"sqlite:///{connection.settings_dict['NAME']}"
    env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
    # The servers and credentials a test registered (openai_register), as an operator would: the
    # settings keep a server's telemetry as JSON text, the variable takes it as an object.
    servers = {
        name: {**entry, **({"telemetry": json.loads(entry["telemetry"])} if entry.get("telemetry") else {})}
        for name, entry in settings.SPECREVIEW_OPENAI_SERVERS.items()
    }
    env["SPECREVIEW_OPENAI_SERVERS"] = json.dumps(servers)
    env["SPECREVIEW_OPENAI_CREDENTIALS"] = ",".join(
        f"{name}={source['env']}" if "env" in source else f"{name}=@{source['file']}"
        for name, source in settings.SPECREVIEW_OPENAI_CREDENTIALS.items()
    )
    return env


@contextlib.contextmanager
def _worker_start(log: Path, *, env: dict | None = None, queues: str = "cpu,gpu"):
    """A real `celery worker` subprocess on the real broker, reading the test database.

    ``env`` overrides the worker's environment (e.g. another broker, a faster heartbeat); ``queues``
    the queues it consumes."""
    from workers.embedded import worker_argv

    proc = subprocess.Popen(
        worker_argv(name=f"test-{os.getpid()}-{time.monotonic_ns()}", queues=queues),
        cwd=ROOT,
        env={**_worker_env(), **(env or {})},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"celery worker exited early:\n{log.read_text()}")
        if "ready." in log.read_text():
            break
        time.sleep(0.2)
    else:
        proc.kill()
        raise RuntimeError(f"celery worker did not become ready:\n{log.read_text()}")
    proc.log_path = log  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def celery_worker_proc(transactional_db, tmp_path):
    """A real worker for one test. Rows the test writes must be committed (transactional_db)."""
    from django.db import connection

    from workers.celery import app

    app.control.purge()
    with _worker_start(tmp_path / "worker.log") as proc:
        yield proc
    app.control.purge()
    connection.close()


def wait_for(predicate, *, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def processes_matching(fragment: str) -> list[int]:
    """Pids of live processes whose command line contains ``fragment`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(
                (line for line in (entry / "status").read_text().splitlines() if line.startswith("State:")),
                "",
            )
        except OSError:
            continue
        if fragment in cmdline and "zombie" not in state:
            pids.append(int(entry.name))
    return pids


@contextlib.contextmanager
def killed_on_exit(proc: subprocess.Popen):
    """Kill ``proc`` if it is still running when the block ends (a failed or timed-out wait)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
