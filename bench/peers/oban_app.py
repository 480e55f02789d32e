"""Oban for Python's no-op worker, on the PostgreSQL database of ``DATABASE_URL``."""

from oban import worker

from bench.peers import postgresql_url as dsn

__all__ = ["Noop", "dsn"]


@worker(queue="default")
class Noop:
    """Does nothing; Oban stamps the job's row as it runs and completes it."""

    async def process(self, job: object) -> None:
        return None
