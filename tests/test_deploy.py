"""Deployment: production settings pass Django's deploy checks and refuse weak secrets; the image
leaves secrets and local state out and runs as a non-root user; the database roles compose creates
give the application rows, never the power to switch the archive's triggers off."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
STRONG_KEY = secrets.token_urlsafe(50)


# Set by the browser tests for Playwright's event loop; never part of a deployment.
TEST_ONLY_ENV = ("DJANGO_ALLOW_ASYNC_UNSAFE",)


def _manage(args: list[str], env_overrides: dict[str, str], drop: tuple[str, ...] = ()):
    env = {k: v for k, v in os.environ.items() if k not in drop + TEST_ONLY_ENV} | env_overrides
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )


PRODUCTION = {
    "SPECREVIEW_ENV": "production",
    "SECRET_KEY": STRONG_KEY,
    "ALLOWED_HOSTS": "specreview.example.com",
    "CACHE_URL": "redis://127.0.0.1:6379/6",
}


def test_it_passes_the_deploy_checks_in_production_with_a_strong_key_and_hosts():
    result = _manage(["check", "--deploy", "--fail-level", "WARNING"], PRODUCTION)
    assert result.returncode == 0, result.stderr + result.stdout


def test_it_warns_in_production_when_login_throttling_would_count_per_process():
    env = dict(PRODUCTION)
    env.pop("CACHE_URL")
    result = _manage(["check", "--deploy", "--fail-level", "WARNING"], env, drop=("CACHE_URL",))
    assert result.returncode != 0 and "specreview.W001" in result.stderr


@pytest.mark.parametrize(
    "key", [None, "change-me", "short-but-set", "a" * 60, "django-insecure-" + "x1y2z3" * 10]
)
def test_it_refuses_to_start_in_production_with_a_weak_or_missing_secret_key(key):
    env = dict(PRODUCTION)
    if key is None:
        env.pop("SECRET_KEY")
    else:
        env["SECRET_KEY"] = key
    result = _manage(["check"], env, drop=("SECRET_KEY", "SECRET_KEY_FILE"))
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "name,value,expected",
    [
        ("ALLOWED_HOSTS", "", "ALLOWED_HOSTS"),
        ("DEBUG", "true", "DEBUG"),
        ("SPECREVIEW_ENV", "prod", "SPECREVIEW_ENV"),
    ],
)
def test_it_refuses_a_production_start_that_would_be_unsafe(name, value, expected):
    result = _manage(["check"], PRODUCTION | {name: value}, drop=(name,))
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr


def test_it_sends_secure_headers_and_a_script_only_from_self_policy_in_production():
    code = (
        "import django; django.setup();"
        "from django.test import Client;"
        "r = Client().get('/accounts/login/', secure=True, HTTP_HOST='specreview.example.com');"
        "print(r.status_code); print(r.headers.get('Content-Security-Policy'));"
        "print(r.headers.get('Strict-Transport-Security'));"
        "r = Client().get('/accounts/login/', HTTP_HOST='specreview.example.com'); print(r.status_code, r.get('Location'))"
    )
    env = dict(os.environ) | PRODUCTION | {"DJANGO_SETTINGS_MODULE": "console.settings"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    status, csp, hsts, plain = result.stdout.strip().splitlines()
    assert status == "200"
    assert "script-src 'self';" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert "max-age=31536000" in hsts
    assert plain.startswith("301 https://specreview.example.com/accounts/login/")


def test_it_leaves_secrets_and_local_state_out_of_the_image():
    lines = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for entry in (".env", ".env.*", "var/", ".venv*", ".git", "*.sqlite3", "secret_key", "**/__pycache__"):
        assert entry in lines, f".dockerignore lacks {entry}"


def test_it_runs_the_image_as_a_non_root_user():
    dockerfile = (ROOT / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", dockerfile, flags=re.MULTILINE)
    assert users, "the Dockerfile sets no USER"
    assert users[-1].split(":")[0] not in {"root", "0"}
    assert not re.search(r"^COPY\s+\.\s", dockerfile, flags=re.MULTILINE), "COPY . copies the whole tree"


# --- database roles (scripts/postgres-initdb/10-specreview-roles.sh) against the local Postgres ---


def _admin_dsn(database: str) -> str:
    url = urlparse(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/specreview"))
    if url.scheme not in {"postgres", "postgresql"}:
        pytest.skip("needs DATABASE_URL=postgres://...")
    auth = url.username or "postgres"
    if url.password:
        auth += f":{url.password}"
    return f"postgresql://{auth}@{url.hostname or '127.0.0.1'}:{url.port or 5432}/{database}"


@pytest.fixture
def scratch_roles():
    """A scratch database with the two roles the init script creates (unique names: roles are
    cluster-wide and other checkouts share this Postgres); dropped afterwards."""
    import psycopg

    suffix = f"{os.getpid()}_{secrets.token_hex(3)}"
    db, owner, app = f"specreview_roles_{suffix}", f"sr_owner_{suffix}", f"sr_app_{suffix}"
    admin = urlparse(_admin_dsn("postgres"))
    with psycopg.connect(_admin_dsn("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    names = {"db": db, "owner": owner, "app": app, "owner_pw": secrets.token_urlsafe(16)}
    names["app_pw"] = secrets.token_urlsafe(16)
    try:
        env = dict(os.environ) | {
            "POSTGRES_USER": admin.username or "postgres",
            "POSTGRES_DB": db,
            "PGHOST": admin.hostname or "127.0.0.1",
            "PGPORT": str(admin.port or 5432),
            "SPECREVIEW_DB_OWNER": owner,
            "SPECREVIEW_DB_OWNER_PASSWORD": names["owner_pw"],
            "SPECREVIEW_DB_APP": app,
            "SPECREVIEW_DB_APP_PASSWORD": names["app_pw"],
        }
        if admin.password:
            env["PGPASSWORD"] = admin.password
        script = ROOT / "scripts" / "postgres-initdb" / "10-specreview-roles.sh"
        result = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        yield names
    finally:
        with psycopg.connect(_admin_dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            for role in (app, owner):
                conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def _role_dsn(names: dict, role: str) -> str:
    admin = urlparse(_admin_dsn("postgres"))
    user, pw = (names["owner"], names["owner_pw"]) if role == "owner" else (names["app"], names["app_pw"])
    return f"postgresql://{user}:{pw}@{admin.hostname or '127.0.0.1'}:{admin.port or 5432}/{names['db']}"


def test_it_lets_the_app_role_read_and_write_rows_but_never_switch_the_archive_triggers_off(scratch_roles):
    import psycopg

    names = scratch_roles
    migrate = _manage(
        ["migrate", "--noinput"],
        {"DATABASE_URL": _role_dsn(names, "owner").replace("postgresql://", "postgres://")},
    )
    assert migrate.returncode == 0, migrate.stderr[-3000:]

    with psycopg.connect(_role_dsn(names, "app"), autocommit=True) as conn:
        # ordinary rows: read, insert, update, delete
        gid = conn.execute("INSERT INTO auth_group (name) VALUES ('roles-test') RETURNING id").fetchone()[0]
        conn.execute("UPDATE auth_group SET name = 'roles-test-2' WHERE id = %s", (gid,))
        assert conn.execute("SELECT name FROM auth_group WHERE id = %s", (gid,)).fetchone() == (
            "roles-test-2",
        )
        conn.execute("DELETE FROM auth_group WHERE id = %s", (gid,))
        assert conn.execute("SELECT count(*) FROM decisions_archiverecord").fetchone() == (0,)

        refused = [
            "ALTER TABLE decisions_archiverecord DISABLE TRIGGER decisions_archiverecord_frozen",
            "ALTER TABLE decisions_decision DISABLE TRIGGER ALL",
            "DROP TRIGGER decisions_auditevent_frozen ON decisions_auditevent",
            "DROP FUNCTION decisions_refuse_frozen()",
            "TRUNCATE decisions_archiverecord",
            "SET session_replication_role = replica",
            "CREATE TABLE sneaky (id int)",
            "CREATE OR REPLACE FUNCTION decisions_refuse_frozen() RETURNS trigger AS $$ BEGIN RETURN NEW; END $$ "
            "LANGUAGE plpgsql",
        ]
        for sql in refused:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql)

    with psycopg.connect(_role_dsn(names, "owner"), autocommit=True) as conn:
        triggers = conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgname LIKE 'decisions_%%_frozen' AND tgenabled = 'O'"
        ).fetchall()
        assert len(triggers) == 4  # still installed and enabled


def _db_user(url: str) -> str:
    # the password is a compose ${VAR:?message} interpolation, which urlparse cannot take apart
    return re.match(r"postgres://([^:@/]+)", url).group(1)  # type: ignore[union-attr]


def test_it_connects_web_and_workers_as_the_app_role_and_migrates_as_the_owner():
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert "./scripts/postgres-initdb:/docker-entrypoint-initdb.d:ro" in services["db"]["volumes"]
    for name in ("web", "worker-cpu", "worker-gpu"):
        assert _db_user(services[name]["environment"]["DATABASE_URL"]) == "specreview_app", name
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert _db_user(services["migrate"]["environment"]["DATABASE_URL"]) == "specreview_owner"
    assert "migrate" not in services["web"]["command"]


def _pip_install_line(build_args: dict[str, str]) -> str:
    """The build stage's pip command as bash expands it for these build args (the Dockerfile's
    ARG defaults for the others): what `docker build` would run, without Docker."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    build = dockerfile.split("\nFROM ", 2)[1]
    args = dict(re.findall(r'^ARG\s+(\w+)="?([^"\n]*)"?$', build, flags=re.MULTILINE)) | build_args
    run = re.search(r"^RUN (.*?)(?<!\\)$", build.replace("\\\n", " "), flags=re.MULTILINE | re.DOTALL)
    assert run, "the build stage has no RUN"
    pip = next(part for part in run.group(1).split("&&") if "pip install" in part)
    script = "".join(f"{k}={shlex.quote(v)}; " for k, v in args.items()) + f"echo {pip.strip()}"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.strip()


def test_the_gpu_image_gets_cuda_torch_and_the_others_the_cpu_build():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    gpu_args = compose["services"]["worker-gpu"]["build"]["args"]
    gpu = _pip_install_line({k: str(v) for k, v in gpu_args.items()})
    cpu = _pip_install_line({})
    assert "download.pytorch.org/whl/cpu" in cpu and cpu.endswith('-e .')
    # PyPI's Linux torch wheels are the CUDA build: the GPU image must not see the CPU index
    assert "download.pytorch.org/whl/cpu" not in gpu and "vllm" in gpu


def test_the_gpu_image_carries_nvml_for_the_telemetry_sampler():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    wanted = compose["services"]["worker-gpu"]["build"]["args"]["EXTRAS"].strip("[]").split(",")
    assert any(dep.startswith("nvidia-ml-py") for dep in extras["gpu"])
    assert any(dep.startswith("nvidia-ml-py") for name in wanted for dep in extras[name.strip()])
