"""Oban for Python's no-op worker, on the PostgreSQL database of ``DATABASE_URL``."""

import os

import dj_database_url
from oban import worker


def dsn() -> str:
    cfg = dj_database_url.parse(os.environ["DATABASE_URL"])
    return (f"postgresql://{cfg['USER'] or 'postgres'}@{cfg['HOST']}:{cfg['PORT'] or 5432}/"
            f"{cfg['NAME']}")


@worker(queue="default")
class Noop:
    """Does nothing; Oban stamps the job's row as it runs and completes it."""

    async def process(self, job: object) -> None:
        return None
