"""Settings of the djqueue demo project (also the base of the test settings).

The database comes from DATABASE_URL; without it, an SQLite file in var/.
"""

import os
from pathlib import Path
from typing import Any

import dj_database_url
import django

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "djqueue-demo-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

INSTALLED_APPS = [
    "admin_interface",
    "colorfield",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "djqueue",
    "project",
]

if django.VERSION < (6, 0):  # the Tasks framework comes from the django-tasks backport
    INSTALLED_APPS.append("django_tasks")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"
ASGI_APPLICATION = "project.asgi.application"
X_FRAME_OPTIONS = "SAMEORIGIN"  # django-admin-interface shows related-object popups in frames
SILENCED_SYSTEM_CHECKS = ["security.W019"]

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
            ],
        },
    },
]


def database_from_env() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'djqueue.sqlite3'}"
    config: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=600))
    engine = config["ENGINE"]
    options = config.setdefault("OPTIONS", {})
    if engine.endswith("sqlite3"):
        # Writers queue on the busy timeout instead of failing; WAL lets readers
        # run beside the writer. IMMEDIATE avoids lock-upgrade deadlocks.
        options.update({
            "transaction_mode": "IMMEDIATE", "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"})
        config["TEST"] = {"NAME": str(VAR_DIR / "test_djqueue.sqlite3")}
    elif engine.endswith("mysql"):
        options.update({"charset": "utf8mb4", "isolation_level": "read committed"})
    return config


DATABASES = {"default": database_from_env()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# The demo prints mail instead of sending it (MAILERS replaces EMAIL_BACKEND in Django 6.1).
if django.VERSION >= (6, 1):
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.console.EmailBackend"}}
else:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"

TASKS = {
    "default": {
        "BACKEND": "djqueue.backend.QueueBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"QUEUE_OPTIONS": {"visibility_timeout": 300}},
    },
}

DJQUEUE = {
    "HANDLERS": {
        "emails": "project.handlers.send_email",
        "reports": "project.handlers.build_report",
        "flaky": "project.handlers.flaky",
        # a batch handler: lists of up to 50 page views, a short list waits up to 1 s
        "events": {"handler": "project.handlers.record_events", "batch": 50,
                   "batch_wait": 1},
    },
    "PERIODIC": {
        "tidy-sessions": {"task": "project.tasks.tidy_sessions", "cron": "*/5 * * * *"},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"djqueue": {"handlers": ["console"], "level": "INFO"}},
    # INFO and up reach the root, where workers keep a handler's records with its message.
    "root": {"level": "INFO"},
}
