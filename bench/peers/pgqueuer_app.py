"""PgQueuer's no-op consumer, on the PostgreSQL database of ``DATABASE_URL``, for
``pgq run bench.peers.pgqueuer_app:main`` (asyncpg: its fastest driver, by its own
benchmarks). ``-- pool``: an asyncpg pool of 20 connections (``AsyncpgPoolDriver``),
which its performance guide advises for high throughput."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver
from pgqueuer.models import Job

from bench.peers import postgresql_url

ENTRYPOINT = "noop"


@contextlib.asynccontextmanager
async def main(options: list[str] | None = None) -> AsyncIterator[PgQueuer]:
    """PgQueuer's factory (an async context manager, since its 1.0)."""
    if options == ["pool"]:
        pool = await asyncpg.create_pool(postgresql_url(), min_size=5, max_size=20)
        queuer = PgQueuer(AsyncpgPoolDriver(pool))
        closing = pool.close
    else:
        connection = await asyncpg.connect(postgresql_url())
        queuer = PgQueuer(AsyncpgDriver(connection))
        closing = connection.close

    @queuer.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        """Does nothing; PgQueuer logs the job's states in its log table."""

    try:
        yield queuer
    finally:
        await closing()


def run_worker() -> None:
    """``python -m bench.peers.pgqueuer_app [--batch-size N] [--pool] [--drain]
    [--log-level LEVEL]``: ``pgq run``'s options, through ``pgqueuer.run`` (its CLI's
    ``--log-level`` fails with the click this venv has: ``'str' object has no attribute
    'name'``). Its CLI's log level, INFO, is the default here too."""
    import argparse
    import asyncio
    import functools
    import logging

    import pgqueuer
    from pgqueuer.types import QueueExecutionMode

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--pool", action="store_true")
    parser.add_argument("--drain", action="store_true", help="exit once the queue is empty")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level)
    factory = functools.partial(main, ["pool"] if args.pool else None)
    mode = QueueExecutionMode.drain if args.drain else QueueExecutionMode.continuous
    asyncio.run(pgqueuer.run(factory, batch_size=args.batch_size, mode=mode))


if __name__ == "__main__":
    run_worker()
