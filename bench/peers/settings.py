"""Django settings for the django-tasks-db peer: its app, its backend, MariaDB."""

import os

import dj_database_url

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django_tasks_db"]
# Persistent connections, as djqueue's demo settings use (conn_max_age=600).
DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=600)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
LOGGING = {"version": 1, "disable_existing_loggers": False}
