"""The peers djqueue is measured against, run from their own venv (.venv-bench)."""

import os


def postgresql_url() -> str:
    """The PostgreSQL database of ``DATABASE_URL`` as a libpq URL (Oban's and asyncpg's
    form)."""
    import dj_database_url

    cfg = dj_database_url.parse(os.environ["DATABASE_URL"])
    return (f"postgresql://{cfg['USER'] or 'postgres'}@{cfg['HOST']}:{cfg['PORT'] or 5432}/"
            f"{cfg['NAME']}")
