"""A read replica: a MariaDB primary and its replica (two servers of the test's own, on
loopback, replicating), with ``READ_DATABASE`` naming the replica. The dashboard, the
metrics and the export read from it and show its lag; writes go to the primary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, wait_until
from tests.faults.server import PrivateMariaDB

pq = pytest.importorskip("pyarrow.parquet")
pytestmark = [pytest.mark.mysql_only, pytest.mark.spark]
PRIMARY_PORT, REPLICA_PORT = (int(p) for p in os.environ.get(
    "DJQUEUE_REPLICA_PORTS", "3321,3322").split(","))


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[PrivateMariaDB, PrivateMariaDB]]:
    primary = PrivateMariaDB(ROOT / "var" / "replica-primary", PRIMARY_PORT, extra_args=(
        "--server-id=1", "--log-bin=primary-bin", "--binlog-format=ROW"))
    replica = PrivateMariaDB(ROOT / "var" / "replica-replica", REPLICA_PORT,
                             extra_args=("--server-id=2",))
    try:
        for server in (primary, replica):
            server.install()
            server.start()
        sql(replica, "CHANGE MASTER TO MASTER_HOST='127.0.0.1', "
            f"MASTER_PORT={PRIMARY_PORT}, MASTER_USER='root', MASTER_PASSWORD='', "
            "MASTER_USE_GTID=no", "START SLAVE")
        sql(primary, "CREATE DATABASE djq CHARACTER SET utf8mb4")
        yield primary, replica
    finally:
        for server in (replica, primary):
            server.stop()


def sql(server: PrivateMariaDB, *statements: str, db: str = "mysql") -> list[tuple]:
    conn = server.connect(db)
    try:
        cursor = conn.cursor()
        for statement in statements:
            cursor.execute(statement)
        return list(cursor.fetchall())
    finally:
        conn.close()


def caught_up(replica: PrivateMariaDB) -> bool:
    conn = replica.connect("mysql")
    try:
        cursor = conn.cursor(__import__("MySQLdb").cursors.DictCursor)
        cursor.execute("SHOW SLAVE STATUS")
        status = cursor.fetchone()
    finally:
        conn.close()
    return bool(status) and status["Seconds_Behind_Master"] == 0 and (
        status["Read_Master_Log_Pos"] == status["Exec_Master_Log_Pos"])


def manage(*args: str) -> str:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings",
           "DATABASE_URL": f"mysql://root@127.0.0.1:{PRIMARY_PORT}/djq",
           "DJQUEUE_TEST_REPLICA_URL": f"mysql://root@127.0.0.1:{REPLICA_PORT}/djq",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("DJQUEUE_TEST_DB_NAME", None)
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"manage.py {args[0]}:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


#: Renders the dashboard and scrapes the metrics as an operator would see them.
LOOK = """
import json
from django.contrib.auth.models import User
from django.test import Client
from djqueue.monitoring import prometheus
client = Client(HTTP_HOST="localhost")
client.force_login(User.objects.get(username="root"))
page = client.get("/admin/djqueue/dashboard/").content.decode()
families = {f.name: f for f in prometheus.DjqueueCollector().collect()}
lag = [s.value for s in families.get("djqueue_read_database_lag_seconds", type(
    "F", (), {"samples": []})).samples]
queues = sorted({s.labels["queue"] for s in families["djqueue_queue_messages"].samples})
print(json.dumps({"page": page, "lag": lag, "queues": queues}))
"""


def look() -> dict:
    return json.loads(manage("shell", "-c", LOOK).strip().splitlines()[-1])


def test_pages_metrics_and_export_read_the_replica(servers, tmp_path: Path):
    primary, replica = servers
    manage("migrate", "--noinput", "-v0")
    manage("shell", "-c", """
import djqueue
from django.contrib.auth.models import User
from djqueue.monitoring import rollups
djqueue.create_queue("r.q")
djqueue.send_batch("r.q", [{"n": n} for n in range(30)])
for message in djqueue.receive("r.q", max_messages=10):
    message.ack()
rollups.sample_depth()
User.objects.create_superuser("root", password="pw")
""")
    wait_until(lambda: caught_up(replica), 60, "the replica caught up")
    assert sql(replica, "SELECT COUNT(*) FROM djqueue_history", db="djq") == [(10,)]
    # A change made on the replica alone: what reads it shows it, what reads the primary
    # would not.
    sql(replica, "UPDATE djqueue_queue SET name = 'r.seen-on-replica' WHERE name = 'r.q'",
        db="djq")

    seen = look()
    assert 'data-queue="r.seen-on-replica"' in seen["page"]
    assert 'id="djqueue-replica" data-lag="0.0"' in seen["page"]
    assert seen["queues"] == ["r.seen-on-replica"] and seen["lag"] == [0.0]

    exported = manage("djqueue_export", "--out", str(tmp_path / "out"), "--master", "local[1]")
    assert f"127.0.0.1:{REPLICA_PORT}/djq" in exported
    history = pq.read_table(tmp_path / "out" / "history").to_pylist()
    assert len(history) == 10 and {row["queue"] for row in history} == {"r.seen-on-replica"}

    sql(replica, "STOP SLAVE")
    stopped = look()
    assert "not replicating" in stopped["page"] and stopped["lag"] == []
    sql(replica, "START SLAVE")
    manage("shell", "-c", "import djqueue; djqueue.send('r.q', {'n': 99})")  # the primary
    assert sql(primary, "SELECT COUNT(*) FROM djqueue_message", db="djq") == [(21,)]
