"""The PySpark export on a real local Spark (local[2]) reading the test database over JDBC."""

import os
import random
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Count
from django.db.models.functions import TruncHour
from django.utils import timezone

import djqueue
from djqueue.exceptions import ConfigurationError
from djqueue.export.jdbc import DEFAULT_JAR_DIR, DRIVERS
from djqueue.models import ExportRun, History, Message, Outcome, State
from tests.conftest import ROOT

pyspark = pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.spark]

ROWS = 50_000


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    jars = ",".join(f"{DEFAULT_JAR_DIR}/{d.jar}" for d in DRIVERS.values())
    session = (SparkSession.builder.master("local[2]").appName("djqueue-tests")
               .config("spark.jars", jars).config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def make_history(count, start_id, base, queues, rng):
    rows = []
    for n in range(count):
        sent = base + timedelta(seconds=rng.uniform(0, 3 * 3600))
        claimed = sent + timedelta(milliseconds=rng.randint(1, 5000))
        rows.append(History(
            id=start_id + n, queue=rng.choice(queues),
            outcome=Outcome.ACKED if rng.random() < 0.9 else Outcome.DELETED,
            attempts=rng.choice([1, 1, 1, 2, 3]), size=rng.randint(10, 500), worker="w",
            group_key=None, sent_at=sent, claimed_at=claimed,
            finished_at=claimed + timedelta(milliseconds=rng.randint(1, 3000))))
    History.objects.bulk_create(rows, batch_size=5000)
    return rows


def read_back(path: Path) -> list[dict]:
    """The rows of a (partitioned) Parquet dataset, as dicts."""
    return pq.read_table(path).to_pylist()


def exporter(out, spark, **options):
    from djqueue.export.job import Exporter, ExportOptions

    return Exporter(ExportOptions(out=str(out), partitions=2, settle_seconds=0, **options),
                    spark=spark)


def test_history_and_reports_equal_the_database(spark, tmp_path):
    rng = random.Random(7)
    queues = [djqueue.create_queue(n) for n in ("mail", "billing", "thumbs")]
    base = (timezone.now() - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    make_history(ROWS, 1, base, queues, rng)
    dlq = djqueue.create_queue("mail.dead")
    djqueue.create_queue("mail2", max_attempts=1, dead_letter_queue=dlq)
    djqueue.send_batch("mail2", [{"n": n} for n in range(30)])
    for m in djqueue.receive("mail2", max_messages=30):
        m.nack(error="boom")
    assert Message.objects.filter(state=State.DEAD).count() == 30

    result = exporter(tmp_path, spark, report=True).run()
    assert result.datasets["history"] == ROWS + 30
    table = read_back(tmp_path / "history")
    ids = list(History.objects.values_list("id", flat=True)) + list(
        Message.objects.filter(state=State.DEAD).values_list("id", flat=True))
    exported = [row["id"] for row in table]
    assert len(exported) == len(ids) == ROWS + 30
    assert sum(exported) == sum(ids)
    assert sum(i * i % 1_000_003 for i in exported) == sum(i * i % 1_000_003 for i in ids)
    expected = Counter(dict(History.objects.values("queue__name").annotate(c=Count("id"))
                            .values_list("queue__name", "c")))
    expected["mail2"] = 30
    assert Counter(str(row["queue"]) for row in table) == expected
    assert {row["outcome"] for row in table if row["queue"] == "mail2"} == {"dead_lettered"}

    hourly = read_back(tmp_path / "report" / "queue_hourly")
    in_sql = {(q, h.replace(tzinfo=None), o): c for q, h, o, c in History.objects.annotate(
        hour=TruncHour("finished_at")).values_list("queue__name", "hour", "outcome")
        .annotate(c=Count("id")).values_list("queue__name", "hour", "outcome", "c")}
    checked = 0
    for row in hourly:
        if row["queue"] == "mail2":
            continue
        hour = row["hour"].replace(tzinfo=None)
        assert row["acked"] == in_sql.get((row["queue"], hour, Outcome.ACKED), 0)
        assert row["deleted"] == in_sql.get((row["queue"], hour, Outcome.DELETED), 0)
        checked += 1
    assert checked == len({(q, h) for q, h, _ in in_sql})
    assert sum(row["messages"] for row in hourly) == ROWS + 30

    # A percentile checked against an exact one computed apart, within the approximation.
    one = max(hourly, key=lambda row: row["messages"])
    hour = one["hour"].replace(tzinfo=None)
    waits = sorted((h.claimed_at - h.sent_at).total_seconds() for h in History.objects.filter(
        queue__name=one["queue"]).annotate(hour=TruncHour("finished_at"))
        if h.hour.replace(tzinfo=None) == hour)
    assert len(waits) == one["messages"]
    rank = min(range(len(waits)), key=lambda i: abs(waits[i] - one["wait_p50"]))
    assert abs(rank - len(waits) / 2) <= max(2, len(waits) / 100)


def test_two_incremental_runs_have_no_duplicates_and_no_gaps(spark, tmp_path):
    rng = random.Random(8)
    queue = djqueue.create_queue("inc")
    base = timezone.now() - timedelta(days=1)
    first = make_history(3000, 1, base, [queue], rng)
    run1 = exporter(tmp_path, spark, incremental=True).run()
    assert run1.window_start is None and run1.datasets["history"] == 3000
    later = ExportRun.objects.get().window_end + timedelta(milliseconds=1)
    second = make_history(2000, 10_001, later, [queue], rng)
    for row in second:  # all finished after run 1's window, before now
        row.finished_at = later + timedelta(microseconds=row.id)
    History.objects.bulk_update(second, ["finished_at"])
    run2 = exporter(tmp_path, spark, incremental=True).run()
    assert run2.window_start == run1.window_end and run2.datasets["history"] == 2000
    run3 = exporter(tmp_path, spark, incremental=True).run()
    assert run3.datasets["history"] == 0
    ids = [row["id"] for row in read_back(tmp_path / "history")]
    assert len(ids) == len(set(ids)) == 5000
    assert set(ids) == {r.id for r in first} | {r.id for r in second}
    assert not (tmp_path / "_staging").exists()


def run_command(*args, **env):
    full_env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings",
                "DJQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"]), **env}
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), "djqueue_export", *args],
                          cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120)


def test_missing_java_is_a_command_error_naming_the_package(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "djqueue_export", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**env, "PATH": str(Path(sys.executable).parent),
             "DJANGO_SETTINGS_MODULE": "tests.settings",
             "DJQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"])})
    assert result.returncode != 0
    assert "openjdk-17-jre-headless" in result.stderr


def test_missing_driver_is_a_command_error_naming_the_package(tmp_path):
    result = run_command("--out", str(tmp_path), DJQUEUE_JDBC_DIR=str(tmp_path / "nothing"))
    assert result.returncode != 0
    assert f"apt-get install {DRIVERS[connection.vendor].debian_package}" in result.stderr


def test_a_queue_name_no_queue_may_have_is_named_as_missing(tmp_path):
    """A byte no UTF-8 reads, in argv, is a lone surrogate: the driver's
    UnicodeEncodeError before; now the queues not found, each named."""
    djqueue.create_queue("cmd")
    with pytest.raises(ConfigurationError) as refused:
        exporter(tmp_path, None, queues=["cmd", "q\udcff", "gone"])
    assert str(refused.value) == "No such queue(s): 'gone', 'q\\udcff'"


def _some_history(count=500):
    queue = djqueue.create_queue("cmd")
    make_history(count, 1, timezone.now() - timedelta(days=1), [queue], random.Random(9))


def test_the_command_runs_spark_and_prints_a_summary(spark, tmp_path):
    _some_history()
    result = run_command("--out", str(tmp_path), "--report", "--master", "local[2]",
                         "--partitions", "2", "--queue", "cmd")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "history: 500 rows" in result.stdout
    assert "report/queue_hourly" in result.stdout and "Done in" in result.stdout
    assert len(read_back(tmp_path / "history")) == 500


def test_the_same_job_runs_under_spark_submit(spark, tmp_path):
    _some_history(300)
    submit = Path(sys.executable).parent / "spark-submit"
    jar = f"{DEFAULT_JAR_DIR}/{DRIVERS[connection.vendor].jar}"
    env = {**os.environ, "DJQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    result = subprocess.run(
        [str(submit), "--master", "local[2]", "--jars", jar,
         str(ROOT / "djqueue" / "export" / "spark_app.py"), "--settings", "tests.settings",
         "--out", str(tmp_path), "--incremental"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "history: 300 rows" in result.stdout
    assert ExportRun.objects.get().rows == 300



def test_times_no_driver_reads_are_exported_empty_and_the_run_goes_on(spark, tmp_path):
    """A time a hand edit left unreadable (PostgreSQL's 'infinity', SQLite text that is
    no time, MariaDB's zero date) failed the whole run on SQLite (Spark's strict cast),
    and on PostgreSQL was written out as a time out of every range, so the Parquet file
    could not be read back. Each such time is exported empty now, its row with it."""
    from tests.conftest import write_unreadable_time

    queue = djqueue.create_queue("odd")
    rows = make_history(100, 1, timezone.now() - timedelta(days=1), [queue], random.Random(3))
    write_unreadable_time("djqueue_history", "sent_at", rows[0].id)
    write_unreadable_time("djqueue_history", "claimed_at", rows[1].id)
    write_unreadable_time("djqueue_history", "finished_at", rows[2].id)
    write_unreadable_time("djqueue_queue", "created_at", queue.id)
    dlq = djqueue.create_queue("odd.dead")
    djqueue.create_queue("odd2", max_attempts=1, dead_letter_queue=dlq)
    djqueue.send_batch("odd2", [{"n": n} for n in range(3)])
    for m in djqueue.receive("odd2", max_messages=3):
        m.nack(error="boom")
    dead = sorted(Message.objects.filter(state=State.DEAD).values_list("id", flat=True))
    write_unreadable_time("djqueue_message", "sent_at", dead[0])
    write_unreadable_time("djqueue_message", "claimed_at", dead[1])

    result = exporter(tmp_path, spark, report=True).run()
    table = {(row["queue"], int(row["id"])): row for row in read_back(tmp_path / "history")}
    # A finish time that cannot be read places its row in no window, except where the
    # database sorts it first (MariaDB's zero date): then the full run takes it.
    unplaced = connection.vendor != "mysql"
    assert result.datasets["history"] == len(table) == 103 - unplaced
    assert (("odd", rows[2].id) not in table) == unplaced
    for key, empty in ((("odd", rows[0].id), "sent_at"), (("odd", rows[1].id), "claimed_at"),
                       (("odd2", dead[0]), "sent_at"), (("odd2", dead[1]), "claimed_at")):
        row = table[key]
        assert row[empty] is None and row["wait_seconds"] is None, row
        assert row["finished_at"] is not None
    kept = table[("odd", rows[3].id)]
    assert kept["sent_at"] == rows[3].sent_at.replace(tzinfo=None)
    assert kept["wait_seconds"] == pytest.approx(
        (rows[3].claimed_at - rows[3].sent_at).total_seconds())
    hourly = read_back(tmp_path / "report" / "queue_hourly")
    assert sum(row["messages"] for row in hourly) == len(table)
