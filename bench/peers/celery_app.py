"""Celery's no-op task, with the local Redis as broker."""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

app = Celery("bench", broker=os.environ.get("CELERY_BROKER", "redis://127.0.0.1:6379/15"))
app.conf.update(worker_hijack_root_logger=False, task_ignore_result=True,
                broker_connection_retry_on_startup=True)
DONE_KEY = "djqueue-bench:done"
PICKUP_KEY = "djqueue-bench:pickup"
_client: redis.Redis | None = None


def client() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(app.conf.broker_url)
    return _client


@app.task(name="bench.noop")
def noop(payload: dict) -> None:
    """Counts itself in Redis so the bench knows when all ran (and records pickup)."""
    client().incr(DONE_KEY)
    if "sent" in payload:
        client().rpush(PICKUP_KEY, time.time() - payload["sent"])
