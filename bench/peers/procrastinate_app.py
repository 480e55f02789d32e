"""procrastinate's app and no-op task, on the PostgreSQL database of ``DATABASE_URL``."""

import os

import dj_database_url
from procrastinate import App, PsycopgConnector


def conninfo() -> str:
    cfg = dj_database_url.parse(os.environ["DATABASE_URL"])
    return (f"host={cfg['HOST']} port={cfg['PORT'] or 5432} user={cfg['USER'] or 'postgres'} "
            f"dbname={cfg['NAME']}")


app = App(connector=PsycopgConnector(conninfo=conninfo()))


@app.task(name="noop")
def noop(payload: dict) -> None:
    """Does nothing; procrastinate records its events."""
