"""The private MariaDB (port 3307, its own data directory under var/), migrated once per
session, and a Cluster per test whose processes are all stopped at teardown."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.harness import ROOT, Cluster
from tests.faults.server import PrivateMariaDB

PORT = int(os.environ.get("DJQUEUE_FAULTS_PORT", "3307"))


@pytest.fixture(scope="session")
def private_mariadb() -> Iterator[PrivateMariaDB]:
    server = PrivateMariaDB(ROOT / "var" / "faults-mariadb", PORT)
    server.install()
    server.start()
    server.recreate()
    try:
        Cluster(server, ROOT / "var" / "faults-setup").manage("migrate", "--run-syncdb", "--noinput", "-v0")
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster(private_mariadb: PrivateMariaDB, tmp_path: Path) -> Iterator[Cluster]:
    if private_mariadb.process is None:  # a test that crashed it and failed midway
        private_mariadb.start()
    cluster = Cluster(private_mariadb, tmp_path)
    yield cluster
    cluster.stop_all()
