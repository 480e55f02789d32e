"""djqueue's commands start once their database answers and holds djqueue's migrations
(djqueue.management.database_ready). A long-running one waits for a database that does
not answer yet; a one-off command, and any command on a database whose djqueue
migrations are not all applied, fails with one line saying what to do. Before, each
failed with a traceback: from Django's checks, or about a missing table or column."""

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

import djqueue
import djqueue.migrations
from tests.conftest import wait_until
from tests.servers import free_port, tcp_forward

pytestmark = pytest.mark.django_db(transaction=True)

#: Each of djqueue's commands, with arguments it would start with.
COMMANDS = [("djqueue_worker", "t.record"), ("djqueue_worker", "t.record", "--processes", "2"),
            ("djqueue_reaper",), ("djqueue_reaper", "--once"), ("djqueue_queues",),
            ("djqueue_workers",), ("djqueue_periodic",), ("djqueue_http", "--port", "0"),
            ("djqueue_metrics", "--port", "0"), ("djqueue_api_client", "list"),
            ("djqueue_export", "--help")]
#: djqueue's migrations, in order.
MIGRATIONS = sorted(path.stem for path in Path(djqueue.migrations.__path__[0]).glob("0*.py"))


@pytest.fixture
def empty_database(tmp_path: Path) -> Iterator[str]:
    """The name of a new database with no tables, beside the test database."""
    if connection.vendor == "sqlite":
        yield str(tmp_path / "empty.sqlite3")
        return
    name = f"{connection.settings_dict['NAME']}_unmigrated"
    quoted = connection.ops.quote_name(name)
    # A pooler (PgBouncer) may keep a session on it after its clients are gone.
    drop = f"DROP DATABASE IF EXISTS {quoted}" + (
        " WITH (FORCE)" if connection.vendor == "postgresql" else "")
    with connection.cursor() as cursor:
        cursor.execute(drop)
        cursor.execute(f"CREATE DATABASE {quoted}" + (
            " CHARACTER SET utf8mb4" if connection.vendor == "mysql" else ""))
    yield name
    with connection.cursor() as cursor:
        cursor.execute(drop)


def test_commands_name_the_migrations_missing_and_the_migrate_command(spawn, empty_database):
    env = {"DJQUEUE_TEST_DB_NAME": empty_database}
    started = [spawn(*command, env=env) for command in COMMANDS]
    for command, process in zip(COMMANDS, started, strict=True):
        code = process.wait(60)
        if command[-1] == "--help":  # argparse answers before any database is read
            assert code == 0 and "usage:" in process.output(), process.output()
            continue
        assert code == 1, (command, process.output())
        assert process.output().strip() == (
            f"CommandError: djqueue's tables on database 'default' are not up to date: "
            f"{len(MIGRATIONS)} migrations to apply (djqueue.{MIGRATIONS[0]} through "
            f"djqueue.{MIGRATIONS[-1]}). Run `python manage.py migrate` first."
        ), (command, process.output())

    # One migration behind, as after an upgrade of djqueue without `migrate`.
    migrating = spawn("migrate", "djqueue", MIGRATIONS[-2], "--noinput", "-v0", env=env)
    assert migrating.wait(300) == 0, migrating.output()
    worker = spawn("djqueue_worker", "t.record", env=env)
    assert worker.wait(60) == 1, worker.output()
    assert worker.output().strip() == (
        f"CommandError: djqueue's tables on database 'default' are not up to date: 1 "
        f"migration to apply (djqueue.{MIGRATIONS[-1]}). Run `python manage.py migrate` "
        "first."), worker.output()

    # Migrated, the commands start.
    assert spawn("migrate", "djqueue", "--noinput", "-v0", env=env).wait(300) == 0
    reaper = spawn("djqueue_reaper", "--once", env=env)
    assert reaper.wait(60) == 0, reaper.output()
    assert "dead workers 0, returned 0" in reaper.output(), reaper.output()


def test_a_worker_started_before_its_database_waits_for_it(spawn):
    """As a container started beside its database's: the worker says it waits and tries
    again until the server answers, then starts; a one-off command fails at once."""
    if connection.vendor == "sqlite":
        pytest.skip("an SQLite database is a file: there is no server to wait for")
    djqueue.create_queue("t.record")
    port = free_port()
    env = {"DJQUEUE_TEST_DB_PORT": str(port), "DJQUEUE_TEST_LOG_INFO": "1"}
    worker = spawn("djqueue_worker", "t.record", env=env)
    waiting = "djqueue_worker: database 'default' does not answer; trying again in"
    # (Under Django's connection pool a try lasts the pool's timeout, 30 s.)
    wait_until(lambda: worker.output().count(waiting) >= 2 or worker.popen.poll() is not None,
               120, "the worker to try twice")
    assert worker.popen.poll() is None and "Traceback" not in worker.output(), worker.output()
    assert f"{waiting} 1 s: " in worker.output() and f"{waiting} 2 s: " in worker.output()

    listing = spawn("djqueue_queues", env=env)
    assert listing.wait(60) == 1, listing.output()
    # Its one line (after, under Django's pool, the pool's own warnings of its tries).
    last = listing.output().strip().splitlines()[-1]
    assert last.startswith("CommandError: Database 'default' does not answer: "), last
    assert "Traceback" not in listing.output(), listing.output()

    with tcp_forward(port, int(connection.settings_dict["PORT"])):
        wait_until(lambda: "started on t.record" in worker.output()
                   or worker.popen.poll() is not None, 60, "the worker's start")
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0, worker.output()


def test_a_database_that_refuses_the_connection_is_not_waited_for(spawn):
    """A server that answers and refuses the database's name (or its user or password)
    will not accept it later: a worker says so and exits rather than waiting, as it does
    for a server that does not answer yet."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite's file that cannot be opened is the test below")
    worker = spawn("djqueue_worker", "t.record", env={"DJQUEUE_TEST_DB_NAME": "no_such_db"})
    assert worker.wait(60) == 1, worker.output()
    line = worker.output().strip().splitlines()[-1]
    assert line.startswith("CommandError: Database 'default' refuses the connection: "), line
    assert line.endswith(". Check DATABASES['default']: its USER, PASSWORD and NAME."), line
    assert "no_such_db" in line and "Traceback" not in worker.output(), worker.output()


def test_a_worker_on_an_sqlite_file_that_cannot_be_opened_says_so_at_once(spawn, tmp_path):
    """A file that cannot be opened now will not open later: no waiting on SQLite."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's file")
    worker = spawn("djqueue_worker", "t.record",
                   env={"DJQUEUE_TEST_DB_NAME": str(tmp_path / "no" / "such.sqlite3")})
    assert worker.wait(60) == 1, worker.output()
    assert worker.output().strip() == ("CommandError: Database 'default' does not answer: "
                                       "unable to open database file"), worker.output()
