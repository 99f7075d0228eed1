"""specreview settings: read from the environment only (see console/env.py and .env.example)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from kombu import Queue

from console.env import (
    ENVIRONMENTS,
    SettingsError,
    envbool,
    envbroker,
    envcache,
    envchoice,
    envcredentials,
    envdatabase,
    envint,
    envint_optional,
    envlist,
    envnetworks,
    envopenai_servers,
    envprometheus,
    envsecret,
    envstr,
    envurls,
    secret_key_local,
    secret_key_strong,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("SPECREVIEW_VAR_DIR", str(BASE_DIR / "var")))  # type: ignore[arg-type]

# production: secure cookies, HSTS, SSL redirect, CSP, and no fallback secret key (docs/deploy.md).
SPECREVIEW_ENV = envchoice("SPECREVIEW_ENV", "development", ENVIRONMENTS)
PRODUCTION = SPECREVIEW_ENV == "production"
DEBUG = envbool("DEBUG", False)
if PRODUCTION and DEBUG:
    raise SettingsError("DEBUG=true is refused with SPECREVIEW_ENV=production")
SECRET_KEY = (
    secret_key_strong("SECRET_KEY", envsecret("SECRET_KEY"))
    if PRODUCTION
    else envsecret("SECRET_KEY") or secret_key_local(VAR_DIR)
)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", [] if PRODUCTION else ["localhost", "127.0.0.1", "[::1]"])
if PRODUCTION and not ALLOWED_HOSTS:
    raise SettingsError("SPECREVIEW_ENV=production needs ALLOWED_HOSTS (comma-separated host names)")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "ninja",  # the API docs page: django-ninja's Swagger UI template and its static files (no CDN)
    "console.accounts",
    "console.traces",
    "console.experiments",
    "console.results",
    "console.analysis",
    "console.policies",
    "console.decisions",
    "console.rollouts",
    "workers",
    "console.demo",  # the top edge, after every app it drives: the demo and run_experiment
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "console.middleware.ContentSecurityPolicy",
    "console.accounts.middleware.LoginRequiredEverywhere",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"
ASGI_APPLICATION = "console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.accounts.context.roles",
            ],
            # One way to show a number on every page: |seconds, |pct, |ratio, |usd, |show:"unit" ...
            "builtins": ["console.number_filters"],
        },
    }
]

DATABASES = {"default": envdatabase("DATABASE_URL", VAR_DIR / "specreview.sqlite3")}
CACHES = {"default": envcache("CACHE_URL")}
EMBEDDED = DATABASES["default"]["ENGINE"].endswith("sqlite3")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
]
LOGIN_URL = "login"
# Passwords and the admin's staff rights from Django's model backend; every role permission from team
# memberships (console/accounts/backends.py, docs/authorization.md).
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "console.accounts.backends.TeamRoleBackend",
]
# Failed logins per username + client address before the form refuses further tries (console/accounts/throttle.py).
SPECREVIEW_LOGIN_MAX_FAILURES = envint("SPECREVIEW_LOGIN_MAX_FAILURES", 5, minimum=1)
SPECREVIEW_LOGIN_LOCKOUT_MINUTES = envint("SPECREVIEW_LOGIN_LOCKOUT_MINUTES", 15, minimum=1)
SPECREVIEW_API_TOKEN_DAYS = envint("SPECREVIEW_API_TOKEN_DAYS", 90, minimum=1)
# Proxies (addresses or CIDR networks) whose X-Forwarded-For names the client for the throttles
# (console/accounts/throttle.py client_address); none by default: the peer address is the client.
SPECREVIEW_TRUSTED_PROXIES = envnetworks("SPECREVIEW_TRUSTED_PROXIES")
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# Collected static files are built from the code (content-hashed names), not instance state: they
# live beside the code, so an instance with its own SPECREVIEW_VAR_DIR (a test, a second console)
# serves the same collection.
STATIC_ROOT = Path(envstr("SPECREVIEW_STATIC_ROOT", str(BASE_DIR / "var" / "staticfiles")))  # type: ignore[arg-type]
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns on every request otherwise
STATICFILES_DIRS = [
    BASE_DIR / "static",
    # plotly.js served from the installed plotly package, so the console works offline and the
    # browser library always matches the version plotly.py writes figures for.
    ("plotly", str(Path(importlib.util.find_spec("plotly").origin).parent / "package_data")),  # type: ignore[union-attr, arg-type]
]
# Collected (manage.py collectstatic; console.static_files.static_collect_if_stale does it for the
# demo, the tests and the benches) with content-hashed names and gzip copies: WhiteNoise serves a
# hashed name with a year-long immutable cache and the compressed copy to browsers that take it.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "console.static_files.CollectedFinder",  # hashed names, for a server that serves through the finders
]
WHITENOISE_USE_FINDERS = DEBUG  # DEBUG serves the sources as they are edited; otherwise STATIC_ROOT only
MEDIA_ROOT = VAR_DIR / "media"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024

# --- Celery (workers/celery.py reads these with namespace CELERY) ---
CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = envbroker("CELERY_BROKER_URL", VAR_DIR)
CELERY_RESULT_BACKEND = envstr("CELERY_RESULT_BACKEND", None)
# The queues, named here only (constants: a worker's -Q names them, so they are not read from the
# environment). A run goes to the queue of the kind of host its engine runs on
# (console.experiments.services.run_queue): gpu for an accelerator, cpu otherwise (the hf engine's
# default). housekeeping carries the periodic reaper, sent by beat: it has its own worker so that
# it never waits behind a six-hour run.
CPU_QUEUE, GPU_QUEUE, HOUSEKEEPING_QUEUE = "cpu", "gpu", "housekeeping"
CELERY_TASK_QUEUES = tuple(Queue(name) for name in (CPU_QUEUE, GPU_QUEUE, HOUSEKEEPING_QUEUE))
CELERY_TASK_DEFAULT_QUEUE = CPU_QUEUE
CELERY_TASK_ROUTES = {
    "workers.runs_reap": {"queue": HOUSEKEEPING_QUEUE},
    "workers.notify": {"queue": HOUSEKEEPING_QUEUE},
    "workers.raw_text_purge": {"queue": HOUSEKEEPING_QUEUE},
    "workers.rollouts_evaluate": {"queue": HOUSEKEEPING_QUEUE},
}  # beat: CELERY_BEAT_SCHEDULE
# A worker reserves one message at a time (with acks_late: only the run it is on): it holds one
# engine for one run, and a run reserved behind a six-hour run would wait while another worker idles.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = envint("SPECREVIEW_RUN_SOFT_TIME_LIMIT", 6 * 3600, minimum=1)
CELERY_TASK_TIME_LIMIT = envint("SPECREVIEW_RUN_TIME_LIMIT", 6 * 3600 + 300, minimum=1)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Redis hands an unacknowledged (acks_late) message to another worker after the visibility
# timeout: it must outlast the longest run, or a second worker starts a run still going.
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT_OPTIONS.setdefault("visibility_timeout", CELERY_TASK_TIME_LIMIT + 3600)
# A broker blip must not cancel a run in progress: its claim, not the message, says who runs it.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False

# --- run lifecycle (console/experiments/runs.py) ---
# A worker writes a heartbeat every SPECREVIEW_RUN_HEARTBEAT_S while it holds a run; the reaper
# (every SPECREVIEW_REAP_EVERY_S) re-queues or fails a run silent for SPECREVIEW_RUN_STALE_AFTER_S.
SPECREVIEW_RUN_HEARTBEAT_S = envint("SPECREVIEW_RUN_HEARTBEAT_S", 2, minimum=1)
SPECREVIEW_RUN_STALE_AFTER_S = envint("SPECREVIEW_RUN_STALE_AFTER_S", 120, minimum=2)
SPECREVIEW_REAP_EVERY_S = envint("SPECREVIEW_REAP_EVERY_S", 30, minimum=1)
SPECREVIEW_RUN_MAX_ATTEMPTS = envint("SPECREVIEW_RUN_MAX_ATTEMPTS", 3, minimum=1)
if SPECREVIEW_RUN_STALE_AFTER_S < 2 * SPECREVIEW_RUN_HEARTBEAT_S:
    raise ImproperlyConfigured(
        f"SPECREVIEW_RUN_STALE_AFTER_S={SPECREVIEW_RUN_STALE_AFTER_S} must be at least twice "
        f"SPECREVIEW_RUN_HEARTBEAT_S={SPECREVIEW_RUN_HEARTBEAT_S}, or live runs would be reaped"
    )
# Raw text retention (console/analysis/retention.py, docs/authorization.md "Retention"): days after a
# trace's import when its prompts, messages, references and outputs are purged; unset keeps them.
SPECREVIEW_RAW_TEXT_RETENTION_DAYS = envint_optional("SPECREVIEW_RAW_TEXT_RETENTION_DAYS", minimum=1)
# The team that users and traces made without naming one join (console/accounts/teams.py): made on
# first use. A team's own retention (Team.raw_text_retention_days) overrides the setting above.
SPECREVIEW_DEFAULT_TEAM = "default"
SPECREVIEW_RETENTION_PURGE_EVERY_S = 24 * 3600
# Notifications (console/decisions/notifications.py, docs/notifications.md): webhook URLs, the HMAC key
# that signs each POST (required with URLs), e-mail recipients, and how often a worker retries a target.
SPECREVIEW_WEBHOOK_URLS = envurls("SPECREVIEW_WEBHOOK_URLS")
SPECREVIEW_WEBHOOK_SECRET = envsecret("SPECREVIEW_WEBHOOK_SECRET")
if SPECREVIEW_WEBHOOK_URLS and not SPECREVIEW_WEBHOOK_SECRET:
    raise SettingsError("SPECREVIEW_WEBHOOK_URLS needs SPECREVIEW_WEBHOOK_SECRET (or _FILE): the key that signs each POST")
# Where a breached trigger whose action is "rollback" posts rollout.revert (signed like the
# webhooks above, with their secret); how often the housekeeping worker looks at running rollouts.
SPECREVIEW_ROLLOUT_REVERT_URLS = envurls("SPECREVIEW_ROLLOUT_REVERT_URLS")
SPECREVIEW_ROLLOUT_EVALUATE_EVERY_S = envint("SPECREVIEW_ROLLOUT_EVALUATE_EVERY_S", 30, minimum=1)
if SPECREVIEW_ROLLOUT_REVERT_URLS and not SPECREVIEW_WEBHOOK_SECRET:
    raise SettingsError("SPECREVIEW_ROLLOUT_REVERT_URLS needs SPECREVIEW_WEBHOOK_SECRET (or _FILE): the key that signs each POST")
SPECREVIEW_NOTIFY_EMAILS = envlist("SPECREVIEW_NOTIFY_EMAILS", [])
SPECREVIEW_NOTIFY_RETRIES = envint("SPECREVIEW_NOTIFY_RETRIES", 8, minimum=0)
SPECREVIEW_NOTIFY_RETRY_S = envint("SPECREVIEW_NOTIFY_RETRY_S", 30, minimum=1)  # doubles each time, at most 1 h
EMAIL_HOST = envstr("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = envsecret("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "specreview@localhost")
CELERY_BEAT_SCHEDULE = {
    "runs-reap": {"task": "workers.runs_reap", "schedule": float(SPECREVIEW_REAP_EVERY_S)},
    "raw-text-purge": {
        "task": "workers.raw_text_purge",
        "schedule": float(SPECREVIEW_RETENTION_PURGE_EVERY_S),
    },
    "rollouts-evaluate": {
        "task": "workers.rollouts_evaluate",
        "schedule": float(SPECREVIEW_ROLLOUT_EVALUATE_EVERY_S),
    },
}

# --- specreview ---
SPECREVIEW_MODEL_CACHE = Path(
    envstr("SPECREVIEW_MODEL_CACHE", str(Path.home() / ".cache" / "specreview" / "models"))  # type: ignore[arg-type]
)
SPECREVIEW_SHARED_DATA = Path(envstr("SPECREVIEW_SHARED_DATA", str(BASE_DIR.parent / "shared" / "data")))  # type: ignore[arg-type]
SPECREVIEW_TRACE_MAX_BYTES = envint("SPECREVIEW_TRACE_MAX_BYTES", 200 * 1024 * 1024, minimum=1)
# One line of a trace file (and one JSON array element, one CSV field); nesting depth of a request.
SPECREVIEW_TRACE_MAX_LINE_BYTES = envint("SPECREVIEW_TRACE_MAX_LINE_BYTES", 16 * 1024 * 1024, minimum=1024)
SPECREVIEW_TRACE_MAX_DEPTH = envint("SPECREVIEW_TRACE_MAX_DEPTH", 64, minimum=2)
SPECREVIEW_MAX_TOKENS_CEILING = envint("SPECREVIEW_MAX_TOKENS_CEILING", 32768, minimum=1)
# Distinct approvers a submitted decision needs (none of them its drafter, editors or submitter);
# a draft may set its own (Decision.approvals_required), and submission fixes the number.
# The bounds are console.decisions.limits.APPROVALS_MIN/MAX.
SPECREVIEW_APPROVALS_REQUIRED = envint("SPECREVIEW_APPROVALS_REQUIRED", 1, minimum=1, maximum=10)
if envbool("SPECREVIEW_APPROVER_MAY_SIGN_OWN", False):
    # Removed: separation of duties has no switch (docs/authorization.md). Fail rather than
    # let an operator believe self-signing still works.
    raise SettingsError(
        "SPECREVIEW_APPROVER_MAY_SIGN_OWN was removed: a signer never drafts, edits or submits"
    )
# The only servers the openai engine may reach, and the keys they get (docs/engines.md).
SPECREVIEW_OPENAI_CREDENTIALS = envcredentials("SPECREVIEW_OPENAI_CREDENTIALS")
SPECREVIEW_OPENAI_SERVERS = envopenai_servers(
    "SPECREVIEW_OPENAI_SERVERS", credentials=SPECREVIEW_OPENAI_CREDENTIALS
)
# The Prometheus servers a guarded rollout may query (docs/rollouts.md), like the servers above.
SPECREVIEW_PROMETHEUS = envprometheus("SPECREVIEW_PROMETHEUS")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy (console/middleware.py): every script is a static file, so no inline script runs.
SPECREVIEW_CSP = envbool("SPECREVIEW_CSP", PRODUCTION)
SPECREVIEW_CSP_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'"
)
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # the container health check speaks plain HTTP on localhost
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 365 * 24 * 3600, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", True)
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_REFERRER_POLICY = "same-origin"
    # Only behind a proxy that sets X-Forwarded-Proto itself (and strips the client's): opt in.
    if envbool("SPECREVIEW_BEHIND_TLS_PROXY", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
