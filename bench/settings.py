"""Benchmark settings: the demo project with a no-op handler on queue `bench`."""

from project.settings import *  # noqa: F403
from project.settings import DJQUEUE, TASKS

DJQUEUE = {**DJQUEUE, "HANDLERS": {"bench": "bench.handlers.noop",
                                   "bench.limited": "bench.handlers.noop"}}
LOGGING = {"version": 1, "disable_existing_loggers": False}
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
# Measure as in production: DEBUG wraps every cursor to record its queries.
DEBUG = False
# The bench's tasks live in bench/tasks.py, outside the installed apps: a worker finds
# them through TASK_MODULES (a message's task path is never imported).
TASKS = {alias: {**params, "OPTIONS": {**params.get("OPTIONS", {}),
                                       "TASK_MODULES": ["bench.tasks"]}}
         for alias, params in TASKS.items()}
