"""The export on a real Spark standalone cluster (a master and two workers started here
from PySpark's own ``spark-class``, on loopback), over a queue partitioned over three
databases and a queue on a second one: the same rows as a local export."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

import djqueue
from djqueue.models import History
from tests.conftest import ROOT, wait_until
from tests.placement.conftest import PLACED_ENV, PLACEMENT_DATABASES

pyspark = pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")
# MariaDB only, to keep `make test` short: the export itself runs on every vendor in
# tests/export, and this one passed on PostgreSQL and SQLite when it was written.
pytestmark = [PLACEMENT_DATABASES, pytest.mark.spark, pytest.mark.mysql_only]


#: What the master logs once it listens: its URL, then its web UI's port.
MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
MASTER_UI = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """A Spark standalone master and two workers (one core each); yields the master URL.

    Every port is the one Spark binds itself (port 0), read back from the master's log:
    a port picked here and handed over would be free only until the JVM binds it, seconds
    later, and another lane's server can take it meanwhile (a CI run once found a
    different server's page at the master's web UI port). The REST submission server,
    on a fixed port, is off."""
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent),
           "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_WORKER_DIR": str(tmp_path / "work"),
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    master_log = tmp_path / "master.log"
    processes = [subprocess.Popen(
        [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", "0", "--webui-port", "0"], env=env,
        stdout=master_log.open("wb"), stderr=subprocess.STDOUT)]
    try:
        def logged(pattern: re.Pattern[str]) -> str | None:
            found = pattern.search(master_log.read_text(errors="replace"))
            return found.group(1) if found else None

        master = str(wait_until(lambda: logged(MASTER_URL), 120, "the master's URL in its log"))
        ui = str(wait_until(lambda: logged(MASTER_UI), 60, "the master's web UI port in its log"))
        for n in range(2):
            processes.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host",
                 "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0", master],
                env=env, stdout=(tmp_path / f"worker-{n}.log").open("wb"),
                stderr=subprocess.STDOUT))

        def alive_workers() -> int:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    found = json.load(r)
            except (OSError, ValueError):
                # Not up yet, or up with an empty page: Jetty can answer before the
                # master's JSON view is mounted (a CI run read an empty body).
                return 0
            return sum(1 for w in found.get("workers", []) if w.get("state") == "ALIVE")

        wait_until(lambda: alive_workers() == 2, 120, "the master's two workers")
        yield master
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def export(out: Path, master: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings",
           "DJQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           **PLACED_ENV}
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), "djqueue_export", "--out",
                           str(out), "--master", master, "--report", "--partitions", "2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def rows(path: Path, key: tuple[str, ...]) -> list[dict]:
    table = pq.read_table(path).to_pylist()
    return sorted(table, key=lambda row: tuple(str(row[k]) for k in key))


def test_a_cluster_export_reads_every_partition_and_equals_the_local_one(cluster, tmp_path):
    djqueue.create_queue("parted.dead")
    djqueue.create_queue("parted.exp", max_attempts=1, dead_letter_queue="parted.dead")
    djqueue.create_queue("placed.exp")
    djqueue.send_batch("parted.exp", [{"n": n} for n in range(90)])
    djqueue.send_batch("parted.exp", [{"n": n} for n in range(30)],
                       group_keys=[f"k{n % 7}" for n in range(30)])
    djqueue.send_batch("placed.exp", [{"n": n} for n in range(40)])
    while batch := djqueue.receive(["parted.exp", "placed.exp"], max_messages=25):
        for message in batch:
            if message.payload["n"] % 10 == 0 and message.queue.name == "parted.exp":
                message.nack(error="dead on purpose")  # max_attempts=1: dead-lettered
            else:
                message.ack()
    on_each = {db: History.objects.using(db).count() for db in ("queues", "p2", "p3")}
    assert all(on_each.values()), f"every database holds history: {on_each}"

    on_cluster = export(tmp_path / "cluster", cluster)
    assert on_cluster.returncode == 0, on_cluster.stderr[-4000:]
    local = export(tmp_path / "local", "local[2]")
    assert local.returncode == 0, local.stderr[-4000:]
    for result in (on_cluster, local):
        assert "Window: the beginning .. " in result.stdout  # it says what it took

    key = ("database", "id")
    history = rows(tmp_path / "cluster" / "history", key)
    assert history == rows(tmp_path / "local" / "history", key)
    assert len(history) == 160  # everything finished before the export started
    assert sum(1 for r in history if r["outcome"] == "dead_lettered") == 12
    assert {r["database"] for r in history} == {"queues", "p2", "p3"}
    hourly = ("queue", "hour")
    assert rows(tmp_path / "cluster" / "report" / "queue_hourly", hourly) == rows(
        tmp_path / "local" / "report" / "queue_hourly", hourly)
    per_queue: dict[str, int] = {}
    for row in rows(tmp_path / "cluster" / "report" / "queue_hourly", hourly):
        per_queue[row["queue"]] = per_queue.get(row["queue"], 0) + row["messages"]
    assert per_queue == {"parted.exp": 120, "placed.exp": 40}
