"""Django settings for the django.tasks peers (``PEER``: tasks-db, dj-queue or django-ox):
the peer's app and backend, on the database of ``DATABASE_URL`` (MariaDB, PostgreSQL or
SQLite).
``PEER_OPTIONS`` (JSON) is the backend's OPTIONS, for a peer's tuned settings."""

import json
import os

import dj_database_url

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
PEER = os.environ.get("PEER", "tasks-db")
APPS = {"tasks-db": ("django_tasks_db", "django_tasks_db.DatabaseBackend"),
        "dj-queue": ("dj_queue", "dj_queue.backend.DjQueueBackend"),
        "django-ox": ("django_ox", "django_ox.backend.OxBackend")}
INSTALLED_APPS = [APPS[PEER][0]]
# Persistent connections, as djqueue's demo settings use (conn_max_age=600).
DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=600)}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # djqueue's own SQLite options (project/settings.py), which Django's documentation
    # advises for SQLite under concurrent writers: at Django's defaults (a rollback
    # journal, synchronous FULL) django-tasks-db drained 312/s here, enqueued 795/s.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE", "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TASKS = {"default": {"BACKEND": APPS[PEER][1],
                     "OPTIONS": json.loads(os.environ.get("PEER_OPTIONS") or "{}")}}
LOGGING = {"version": 1, "disable_existing_loggers": False}
