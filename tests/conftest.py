"""Fixtures: real worker and reaper processes on the test database, and waiting on conditions."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

from djqueue.api import receiving
from djqueue.api.receive_wakeups import receive_wakeups
from djqueue.storage import host_clock
from djqueue.storage.queue_lookup import forget_cached
from tests import table_emptying

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def vendor() -> str:
    return connection.vendor


mysql_only = pytest.mark.mysql_only
needs_row_locks = pytest.mark.row_locks


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM (a stopped ``make test``, a CI's time limit) ends the run as Ctrl-C
    does: pytest then tears the fixtures down, so the servers and worker processes the
    tests started are stopped rather than left behind. A transactional test ends by
    emptying the tables it wrote to (tests.table_emptying)."""
    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupted)
    table_emptying.install()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's thread method (pyproject.toml), with one step added: before the
    run exits, the processes it started (servers, workers, Spark's JVMs) are stopped.

    Why: on a hung test the thread method dumps the stacks and ends pytest with
    ``os._exit``, which runs no fixture's teardown; the servers and workers the tests
    started would outlive the run, holding their ports and the test database. The
    stacks are dumped first, as they were when the test hung."""
    import pytest_timeout

    dump_and_exit = getattr(pytest_timeout, "timeout_timer", None)
    if settings.method != "thread" or dump_and_exit is None:
        return None  # pytest-timeout's own
    from tests.servers import stop_descendants

    def hung() -> None:
        exit_now = os._exit

        def stop_then_exit(status: int) -> None:
            signalled = stop_descendants(grace=10)
            sys.stderr.write(f"djqueue: stopped {len(signalled)} processes the run started\n")
            exit_now(status)

        os._exit = stop_then_exit  # the process ends within the call below
        dump_and_exit(item, settings)

    timer = threading.Timer(settings.timeout, hung)
    timer.name = f"timeout {item.nodeid}"

    def cancel() -> None:
        timer.cancel()
        timer.join()

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # pytest-timeout's cancel calls it
    timer.start()
    return True


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("mysql_only") and connection.vendor != "mysql":
        pytest.skip("MariaDB/MySQL only")
    if item.get_closest_marker("row_locks") and not (
            connection.features.has_select_for_update_skip_locked):
        pytest.skip("SQLite has no row locks: writers are serialised instead")


@pytest.fixture(scope="session", autouse=True)
def _processes_behind_pgbouncer(request: pytest.FixtureRequest) -> Iterator[None]:
    """With ``DJQUEUE_TEST_BEHIND_PGBOUNCER=1`` on PostgreSQL, the worker, reaper and
    other processes the tests start connect through a PgBouncer in transaction mode
    (tests/pgbouncer.py), as many deployments run them; the test process itself, which
    sets the scene and checks it, connects directly. ``make test`` runs the tests of
    the processes so (docs/testing.md)."""
    if not os.environ.get("DJQUEUE_TEST_BEHIND_PGBOUNCER") or connection.vendor != "postgresql":
        yield
        return
    from tests.pgbouncer import PORT_VARIABLE, running

    # Set up before the pooler, so torn down after it: the test database is dropped
    # once the pooler's server sessions on it are gone.
    request.getfixturevalue("django_db_setup")

    with running(connection.settings_dict, pool_size=20) as port:
        os.environ[PORT_VARIABLE] = str(port)
        try:
            yield
        finally:
            del os.environ[PORT_VARIABLE]


@pytest.fixture(scope="session", autouse=True)
def _clocks_compared_as_the_session_starts(request: pytest.FixtureRequest,
                                           django_db_blocker: Any) -> None:
    """The test process compares its clock with the databases' once, before any test,
    on a schedule it never runs again (djqueue.storage.host_clock): without one,
    ``database_now`` would compare by itself, as a web process does, at a test's first
    need and every CLOCK_CHECK_INTERVAL after, on a connection of its own that a test
    counting the server's sessions would count too."""
    if not any(item.get_closest_marker("django_db") for item in request.session.items):
        return
    request.getfixturevalue("django_db_setup")
    with django_db_blocker.unblock():
        host_clock.ClockChecks(logging.getLogger("tests"), "Test process").check()


@pytest.fixture(autouse=True)
def _fresh_queue_cache() -> Iterator[None]:
    forget_cached()
    yield
    forget_cached()


@pytest.fixture(autouse=True)
def _promotion_due() -> None:
    """A receive promotes due scheduled messages at most once a PROMOTE_INTERVAL in a
    process (``receiving._promotion``, module state): each test starts with one due, so
    that an earlier test's promotion under a second ago does not leave its due messages
    scheduled."""
    receiving._promotion.last.clear()


@pytest.fixture(autouse=True)
def _receive_wakeups_stopped(django_db_blocker: Any) -> Iterator[None]:
    """A test whose receive waited started this process's receiver row and its thread
    (djqueue.api.receive_wakeups): stopped, and the row deleted, when the test ends."""
    yield
    with django_db_blocker.unblock():
        receive_wakeups.stop()


def wait_until(predicate: Callable[[], object], timeout: float, what: str,
               interval: float = 0.05, progress: Callable[[], object] | None = None) -> object:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds.

    With ``progress``, the timeout counts from the last change of ``progress()``: a long
    run whose length depends on the machine's speed fails only when it stalls."""
    watch = _Stall(timeout, progress)
    while True:
        value = predicate()
        if value:
            return value
        if watch.stalled():
            pytest.fail(f"timed out after {timeout}s{watch.since} waiting for {what}")
        time.sleep(interval)


class _Stall:
    """A timeout that starts again whenever ``progress()`` changes (if given)."""

    def __init__(self, timeout: float, progress: Callable[[], object] | None) -> None:
        self.timeout, self.progress = timeout, progress
        self.seen = progress() if progress is not None else None
        self.deadline = time.monotonic() + timeout

    @property
    def since(self) -> str:
        return "" if self.progress is None else f" without progress (last: {self.seen!r})"

    def stalled(self) -> bool:
        if self.progress is not None:
            now = self.progress()
            if now != self.seen:
                self.seen, self.deadline = now, time.monotonic() + self.timeout
        return time.monotonic() >= self.deadline


class Process:
    """A manage.py command in a subprocess on the test database."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None,
                 prefix: tuple[str, ...] = ()) -> None:
        """``prefix``: a command that runs Python, as ``unshare`` does."""
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings",
               "DJQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
               "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1", **(env or {})}
        self.args = args
        self.log = log
        self._log_file = log.open("wb")
        self.popen = subprocess.Popen(
            [*prefix, sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env,
            stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def wait(self, timeout: float, progress: Callable[[], object] | None = None) -> int:
        """Its exit status; fail if it still runs after ``timeout`` seconds (counted from
        the last change of ``progress()``, if given: see :func:`wait_until`)."""
        watch = _Stall(timeout, progress)
        while True:
            try:
                return self.popen.wait(max(0.0, min(1.0, watch.deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                if watch.stalled():
                    break
        # SIGABRT makes faulthandler (PYTHONFAULTHANDLER) print every thread's stack,
        # so a hang is reported with where it hangs.
        self.popen.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        pytest.fail(f"process {self.pid} still running after {timeout}s{watch.since}:\n"
                    f"{self.output()}")

    def output(self) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")[-8000:]

    def stop(self) -> None:
        """Kill it and its children (a supervisor's workers would otherwise stop gracefully,
        after the test, on the test database)."""
        if self.popen.poll() is None:
            descendants = _descendants(self.pid)
            self.popen.kill()
            self.popen.wait(10)
            for pid in descendants:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._log_file.close()


def _descendants(pid: int) -> list[int]:
    """The pids of ``pid``'s children, grandchildren..., from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        found += frontier
    return found


@pytest.fixture
def admin_theme() -> None:
    """The demo's admin theme, for a test that renders admin pages: the default theme
    turns on a language chooser, which asks for LocaleMiddleware, and warns."""
    from django.core.management import call_command

    call_command("loaddata", "djqueue_admin_theme", verbosity=0)


@pytest.fixture
def superuser(admin_theme: None) -> Any:
    """A logged-in superuser's test client, on the demo's admin theme."""
    from django.contrib.auth.models import User
    from django.test import Client

    User.objects.create_superuser("root", password="pw")
    client = Client()
    client.login(username="root", password="pw")
    return client


#: The processes a test's ``spawn`` started, for its failure report.
SPAWNED = pytest.StashKey[list[Process]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report ends with the output of each process it started: they are
    still running then, and their logs go with the test's temporary folder, which pytest
    keeps for three runs only (a CI run is ten)."""
    report = yield
    if report.when == "call" and report.failed:
        for process in item.stash.get(SPAWNED, []):
            report.sections.append(
                (f"manage.py {' '.join(process.args)} (pid {process.pid})", process.output()))
    return report


@pytest.fixture
def spawn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Process]]:
    """Start ``manage.py <args>``; every process is killed at teardown."""
    started: list[Process] = []
    request.node.stash[SPAWNED] = started

    def start(*args: str, env: dict[str, str] | None = None,
              prefix: tuple[str, ...] = ()) -> Process:
        process = Process(list(args), tmp_path / f"proc-{len(started)}.log", env, prefix)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


#: A time each database stores but its driver, or Django, cannot read back.
UNREADABLE_TIME = {"postgresql": "'infinity'",  # psycopg: "timestamp too large"
                   "mysql": "'0000-00-00 00:00:00'",  # mysqlclient: None; as text, year 0
                   "sqlite": "'2026-13-45 99:00:00'"}  # Django: "month must be in 1..12"


def write_unreadable_time(table: str, column: str, row_id: object) -> None:
    """Set ``column`` of row ``row_id`` to a time that cannot be read, as a hand edit or
    another tool could (MySQL refuses zero dates unless the session allows them)."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute("SET SESSION sql_mode = ''")
        cursor.execute(f"UPDATE {table} SET {column} = {UNREADABLE_TIME[connection.vendor]} "
                       f"WHERE id = %s", [row_id])
        if connection.vendor == "mysql":
            cursor.execute("SET SESSION sql_mode = DEFAULT")


def in_threads(work: Callable[[int], object], count: int, timeout: float = 120,
               stop: threading.Event | None = None) -> list:
    """Run ``work(i)`` for i in range(count) on threads started together (hence on
    separate database connections); return the results in order, re-raising the
    first exception.

    ``timeout`` bounds the whole run. ``stop`` is set as soon as a thread fails or
    time is up, so work that loops until the others are done must watch it: one
    dead thread must not leave the rest spinning (and holding locks) forever.
    """
    stop = stop if stop is not None else threading.Event()
    barrier = threading.Barrier(count)
    results: list = [None] * count
    errors: list[BaseException] = []

    def run(slot: int) -> None:
        try:
            barrier.wait(timeout)
            results[slot] = work(slot)
        except BaseException as exc:
            errors.append(exc)
            stop.set()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,), name=f"in_threads-{i}", daemon=True)
               for i in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    late = [i for i, thread in enumerate(threads) if thread.is_alive()]
    if late:
        stop.set()
        for thread in threads:
            thread.join(30)
    if errors:
        raise errors[0]
    if late:
        pytest.fail(f"threads {late} of {count} still running after {timeout}s")
    return results


def in_test_thread(call: Callable[..., T], *args: Any) -> Awaitable[T]:
    """``call(*args)``, awaited from a coroutine that ``run_async`` runs, on the one thread
    whose database connections ``run_async`` closes at the end (asyncio.to_thread's
    threads would leave theirs open, and PostgreSQL could not drop the test database)."""
    return sync_to_async(call, thread_sensitive=True)(*args)


def run_async(coroutine: Any) -> Any:
    """Run a coroutine from a sync test, closing afterwards the connections of the
    thread that ``sync_to_async`` used (it is not the test's own)."""
    async def main() -> Any:
        try:
            return await coroutine
        finally:
            await sync_to_async(connections.close_all, thread_sensitive=True)()

    return asyncio.run(main())


def kill(process: Process) -> None:
    process.signal(signal.SIGKILL)
    process.wait(10)
