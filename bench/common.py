"""What the benchmarks share: the bench database, Django set-up, a raw connection."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BENCH_DB = "djq_bench"


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()


def fresh_database(url: str):
    """Create the bench database anew, set Django up on it and migrate; returns an admin
    connection for :func:`drop_database`."""
    admin = raw_connection(url.rsplit("/", 1)[0] + "/mysql")
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
    admin.cursor().execute(f"CREATE DATABASE {BENCH_DB} CHARACTER SET utf8mb4")
    setup_django(url)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return admin


def drop_database(admin) -> None:
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")


def raw_connection(url: str):
    import dj_database_url
    import MySQLdb

    cfg = dj_database_url.parse(url)
    return MySQLdb.connect(host=cfg["HOST"], port=int(cfg["PORT"] or 3306), user=cfg["USER"],
                           passwd=cfg["PASSWORD"] or "", db=cfg["NAME"], charset="utf8mb4",
                           autocommit=True)


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds else float("inf")
