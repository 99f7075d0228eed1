"""specreview settings: read from the environment only (see console/env.py and .env.example)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from console.env import envbool, envbroker, envdatabase, envint, envlist, envsecret, envstr, secret_key_local

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("SPECREVIEW_VAR_DIR", str(BASE_DIR / "var")))  # type: ignore[arg-type]

DEBUG = envbool("DEBUG", False)
SECRET_KEY = envsecret("SECRET_KEY") or secret_key_local(VAR_DIR)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "console.accounts",
    "console.traces",
    "console.experiments",
    "console.analysis",
    "console.policies",
    "console.decisions",
    "workers",
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
        },
    }
]

DATABASES = {"default": envdatabase("DATABASE_URL", VAR_DIR / "specreview.sqlite3")}
EMBEDDED = DATABASES["default"]["ENGINE"].endswith("sqlite3")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns on every request otherwise
STATICFILES_DIRS = [
    BASE_DIR / "static",
    # plotly.js served from the installed plotly package, so the console works offline and the
    # browser library always matches the version plotly.py writes figures for.
    ("plotly", str(Path(importlib.util.find_spec("plotly").origin).parent / "package_data")),  # type: ignore[union-attr, arg-type]
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
MEDIA_ROOT = VAR_DIR / "media"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024

# --- Celery (workers/celery.py reads these with namespace CELERY) ---
CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = envbroker("CELERY_BROKER_URL", VAR_DIR)
CELERY_RESULT_BACKEND = envstr("CELERY_RESULT_BACKEND", None)
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = envint("SPECREVIEW_RUN_SOFT_TIME_LIMIT", 6 * 3600, minimum=1)
CELERY_TASK_TIME_LIMIT = envint("SPECREVIEW_RUN_TIME_LIMIT", 6 * 3600 + 300, minimum=1)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- specreview ---
SPECREVIEW_MODEL_CACHE = Path(
    envstr("SPECREVIEW_MODEL_CACHE", str(Path.home() / ".cache" / "specreview" / "models"))  # type: ignore[arg-type]
)
SPECREVIEW_SHARED_DATA = Path(envstr("SPECREVIEW_SHARED_DATA", str(BASE_DIR.parent / "shared" / "data")))  # type: ignore[arg-type]
SPECREVIEW_TRACE_MAX_BYTES = envint("SPECREVIEW_TRACE_MAX_BYTES", 200 * 1024 * 1024, minimum=1)
SPECREVIEW_MAX_TOKENS_CEILING = envint("SPECREVIEW_MAX_TOKENS_CEILING", 32768, minimum=1)
SPECREVIEW_APPROVER_MAY_SIGN_OWN = envbool("SPECREVIEW_APPROVER_MAY_SIGN_OWN", False)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    X_FRAME_OPTIONS = "DENY"
