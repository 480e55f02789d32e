"""A worker or reaper whose host's clock is far from the database server's says so as it
starts, and when its clock is set apart while it runs, and stamps and judges lease ends,
delays and heartbeats by the server's clock (djqueue.storage.host_clock). Real
processes, their clocks set apart by libfaketime."""

import glob
import json
import logging
import re
import shutil
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

import djqueue
from djqueue.http import access
from djqueue.maintenance.reaper import Reaper
from djqueue.models import ApiClient, ApiPermission, Message, ProcessKind, State, Worker
from djqueue.storage import clock_reads, host_clock
from djqueue.storage.statements.vendor_sql import clock_sql
from tests.conftest import wait_until
from tests.http.conftest import start_api_server
from tests.models import Effect
from tests.monitoring.test_metrics import scrape
from tests.servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)

#: The processes' monotonic clocks stay true: only the time of day is set apart.
CLOCK_ENV = {"FAKETIME_DONT_FAKE_MONOTONIC": "1", "DJQUEUE_TEST_LOG_INFO": "1"}


@pytest.fixture(autouse=True)
def _server_database() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite is a file on this host: its clock is the host's")
    if shutil.which("faketime") is None:
        pytest.fail("libfaketime is missing: `scripts/ensure_system.sh faketime` installs it")


def test_this_hosts_clock_reads_as_the_database_servers():
    offsets = host_clock.compare_clocks(logging.getLogger("tests"), "test")
    assert set(offsets) == {"default"} and abs(offsets["default"]) < host_clock.WARN_PAST


def test_checks_made_after_a_comparison_start_from_it(settings):
    """An API server's long polls make their checks after djqueue_http compared as it
    started: the first is due an interval after that comparison, and its offsets are
    what the process's row shows until then."""
    settings.DJQUEUE = {**settings.DJQUEUE, "CLOCK_CHECK_INTERVAL": 600.0}
    offsets = host_clock.compare_clocks(logging.getLogger("tests"), "test")
    checks = host_clock.ClockChecks(logging.getLogger("tests"), "test")
    assert not checks.due and host_clock.latest_offset("default") == offsets["default"]
    assert host_clock.latest_offset("no-such-database") is None


@pytest.fixture
def no_comparisons(monkeypatch) -> None:
    """This process's record of comparisons set aside for the test: none made, none due,
    no ClockChecks running (a web process), until the test makes them."""
    for name in ("_latest", "_compare_due", "_step_compare_due"):
        monkeypatch.setattr(host_clock, name, {})
    monkeypatch.setattr(host_clock, "_scheduled", None)


@pytest.fixture
def scheduled_checks(no_comparisons, monkeypatch) -> None:
    """As ``no_comparisons``, in a process whose ClockChecks runs (a worker's)."""
    monkeypatch.setattr(host_clock, "_scheduled", (logging.getLogger("tests"), "test"))


def test_a_process_that_compares_by_itself_does_so_beside_the_callers_connection(
        no_comparisons):
    """A web process's comparison (``database_now``'s own) is made on a connection of
    its own: not among the caller's queries, nor in its transaction."""
    djqueue.create_queue("t.record")
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        djqueue.send("t.record", {"n": 1}, delay=60)
    assert abs(host_clock.latest_offset("default")) < host_clock.WARN_PAST
    assert not [q for q in queries.captured_queries if "UNIX_TIMESTAMP" in q["sql"]
                or "clock_timestamp" in q["sql"]], queries.captured_queries


def test_database_now_compares_again_unless_a_clock_check_runs(no_comparisons):
    """A process that makes a ClockChecks and never runs it (the supervisor, the metrics
    server) is compared for by ``database_now`` every CLOCK_CHECK_INTERVAL, as a web
    process is; once one runs, ``database_now`` leaves the comparisons to it."""
    checks = host_clock.ClockChecks(logging.getLogger("tests"), "test")
    host_clock.database_now("default")
    first = host_clock._latest["default"].at
    host_clock._compare_due["default"] = 0.0  # its interval passed
    host_clock.database_now("default")
    second = host_clock._latest["default"].at
    assert second > first
    checks.check()
    third = host_clock._latest["default"].at
    host_clock._compare_due["default"] = 0.0
    host_clock.database_now("default")
    assert host_clock._latest["default"].at == third > second


class ShiftedClock:
    """This process's clocks as djqueue reads them (``install``). ``step`` moves them at
    once; ``during_query`` (an execute wrapper) moves them while each of a comparison's
    first ``reads`` reads of the database's clock runs, after the query and before the
    readings that follow it: by ``time_of_day`` seconds for the time of day and
    ``steady`` for the steady clock, moves that stay; and by ``slow`` seconds for those
    two readings alone, as if the query had taken that much longer."""

    def __init__(self, time_of_day: float = 0.0, steady: float = 0.0, *, reads: int = 1,
                 slow: float = 0.0) -> None:
        self.moves, self.reads, self.slow = (time_of_day, steady), reads, slow
        self.shifts, self.late_readings = (0.0, 0.0), 0

    def install(self, monkeypatch) -> "ShiftedClock":
        for module in (host_clock, clock_reads):
            monkeypatch.setattr(module, "time", self)
        return self

    def step(self, time_of_day: float, steady: float) -> None:
        self.shifts = time_of_day, steady

    def time(self) -> float:
        return time.time() + self.shifts[0] + self._late()

    def clock_gettime(self, clock: int) -> float:
        return time.clock_gettime(clock) + self.shifts[1] + self._late()

    def _late(self) -> float:
        if not self.late_readings:
            return 0.0
        self.late_readings -= 1
        return self.slow

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    def during_query(self, execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if self.reads and sql == f"SELECT {clock_sql(connection.vendor)}":
            self.reads -= 1
            self.shifts = tuple(s + m for s, m in zip(self.shifts, self.moves, strict=True))
            self.late_readings = 2 if self.slow else 0
        return result


def test_a_clock_stepped_during_a_comparison_is_read_again(monkeypatch, scheduled_checks):
    """A step of the clock falling between the two readings around the query would
    read as an offset of half the step, and the database's time carried from it would
    be off by as much: a heartbeat stamped by it 45 s old, and its process taken for
    dead (the reaper reaped its own row so, as its clock came back from 90 s ahead).
    That read is set aside; the time carried is the database's, step or none."""
    clock = ShiftedClock(90.0, 0.0).install(monkeypatch)  # a step (a hand, NTP)
    with connection.execute_wrapper(clock.during_query):
        offsets = host_clock.compare_clocks(logging.getLogger("tests"), "test")
    assert 89.0 < offsets["default"] < 91.0, offsets
    carried = host_clock.database_now("default")
    assert abs((carried - timezone.now()).total_seconds()) < host_clock.WARN_PAST, carried


def test_a_slow_read_is_passed_over_for_a_quicker_one(monkeypatch, caplog,
                                                       scheduled_checks):
    """One read a busy server made 3 s long would give an offset of 1.5 s and a margin
    of 2.5 s; the comparison keeps the quickest of its reads instead."""
    clock = ShiftedClock(slow=3.0).install(monkeypatch)
    with connection.execute_wrapper(clock.during_query), caplog.at_level(logging.WARNING):
        offsets = host_clock.compare_clocks(logging.getLogger("tests"), "test")
    latest = host_clock._latest["default"]
    assert clock.reads == 0 and abs(offsets["default"]) < 0.2, offsets
    assert latest.margin < host_clock.WARN_PAST + 0.2 and not caplog.records, latest


def test_a_slow_read_within_its_margin_neither_warns_nor_moves_times(
        monkeypatch, caplog, scheduled_checks):
    """Reads whose round trip is 3 s give an offset of 1.5 s, past WARN_PAST but
    within half the round trip, where the database's clock may have been read: it is
    not warned of, and ``database_now`` keeps this host's time rather than one 1.5 s
    behind it (it was moved before, unwarned, by any offset past WARN_PAST)."""
    clock = ShiftedClock(slow=3.0, reads=clock_reads.READS).install(monkeypatch)
    with connection.execute_wrapper(clock.during_query), caplog.at_level(logging.WARNING):
        offsets = host_clock.compare_clocks(logging.getLogger("tests"), "test")
    assert host_clock.WARN_PAST < offsets["default"] < 2.0, offsets
    assert not caplog.records, caplog.text
    latest = host_clock._latest["default"]
    assert not latest.far and 2.5 <= latest.margin < 3.0, latest
    now = host_clock.database_now("default")
    assert abs(now.timestamp() - clock.time()) < 0.2, (now, clock.time())


def test_clocks_stepped_together_after_a_comparison_are_compared_again(
        monkeypatch, caplog, scheduled_checks):
    """This host's clock and the database's stepped 15 s forward together after a
    comparison (NTP setting a fleet; a database on this host). Seen from this process,
    that is its time of day moving 15 s from the steady clock the database's time is
    carried on while the database's moves with it: here the steady clock is stepped
    15 s back, the same thing. The carried time is now 15 s behind both clocks (times
    stamped by it were so until the next comparison, ten minutes on: a clean-clone run
    saw 15 s); the database is compared again at once and its times are the host's."""
    clock = ShiftedClock().install(monkeypatch)
    host_clock.compare_clocks(logging.getLogger("tests"), "test")
    first = host_clock._latest["default"]
    clock.step(0.0, -15.0)
    with caplog.at_level(logging.WARNING):
        now = host_clock.database_now("default")
    assert abs(now.timestamp() - clock.time()) < host_clock.WARN_PAST, (now, clock.time())
    again = host_clock._latest["default"]
    assert again.at > first.at and not again.far and not caplog.records, caplog.text


def test_this_hosts_clock_stepped_alone_is_compared_again_and_warned_of(
        monkeypatch, caplog, scheduled_checks):
    """This host's time of day stepped 15 s forward after a comparison, the database's
    not (a hand, or NTP setting a clock gone wrong the wrong way): compared again at
    once, warned of under the process's own name, and its times are the database's.
    Compared once: the next call finds the clocks as the comparison left them. Set
    right again, it is compared again and told of as back."""
    clock = ShiftedClock().install(monkeypatch)
    host_clock.compare_clocks(logging.getLogger("tests"), "test")
    first = host_clock._latest["default"]
    clock.step(15.0, 0.0)
    with caplog.at_level(logging.INFO):
        now = host_clock.database_now("default")
        assert abs(clock.time() - 15.0 - now.timestamp()) < host_clock.WARN_PAST, now
        ahead = host_clock._latest["default"]
        assert ahead.at > first.at and ahead.far and 14.0 < ahead.offset < 16.0, ahead
        host_clock.database_now("default")
        assert host_clock._latest["default"] == ahead
        assert [m for m in caplog.messages if re.match(
            r"test: this host's clock is 1[45]\.\d s ahead of database default's", m)]

        host_clock._step_compare_due.clear()  # a second on: one comparison a second
        clock.step(0.0, 0.0)
        now = host_clock.database_now("default")
        assert abs(now.timestamp() - time.time()) < host_clock.WARN_PAST, now
        assert not host_clock._latest["default"].far
    assert caplog.messages[-1] == ("test: this host's clock is back within 1.0 s of "
                                   "database default's"), caplog.messages


def test_a_worker_ahead_and_a_reaper_behind_warn_as_they_start(spawn):
    djqueue.create_queue("f.poison")
    ahead = spawn("djqueue_worker", "f.poison", env=CLOCK_ENV,
                  prefix=("faketime", "-f", "+90s"))
    behind = spawn("djqueue_reaper", "--once", env=CLOCK_ENV, prefix=("faketime", "-f", "-90s"))
    assert behind.wait(60) == 0, behind.output()
    assert re.search(r"Reaper: this host's clock is (89\.9|90\.0|90\.1) s behind database "
                     r"default's\. djqueue stamps and judges leases, delays and retry "
                     r"times by the database's clock", behind.output()), behind.output()
    wait_until(lambda: "started on f.poison" in ahead.output(), 60, "the worker's start")
    assert re.search(r"Worker: this host's clock is (89\.9|90\.0|90\.1) s ahead of database "
                     r"default's", ahead.output()), ahead.output()
    # A process on the host's own clock says nothing of it.
    in_time = spawn("djqueue_reaper", "--once", env=CLOCK_ENV)
    assert in_time.wait(60) == 0 and "clock is" not in in_time.output(), in_time.output()


def test_each_processs_clock_is_shown_with_its_row(spawn, client, superuser):
    """A worker writes its latest offset on its row (as it registers, then at each beat),
    so the workers' listing, the metrics and the dashboard show every host's clock: one
    90 s ahead as far, one on the true clock near zero (a reaper's row, below, too)."""
    djqueue.create_queue("f.poison")
    ahead = spawn("djqueue_worker", "f.poison", env=CLOCK_ENV,
                  prefix=("faketime", "-f", "+90s"))
    in_time = spawn("djqueue_worker", "f.poison", env=CLOCK_ENV)
    # Named by the id each logs as it starts (faketime runs the worker as its child).
    ahead_id, in_time_id = (wait_until(
        lambda w=worker: re.search(r"Worker (\S+) started on f\.poison", w.output()), 60,
        "its start").group(1) for worker in (ahead, in_time))
    offsets = {w.id: w.clock_offset for w in Worker.objects.all()}
    assert 89.5 < offsets[ahead_id] < 90.5 and abs(offsets[in_time_id]) < host_clock.WARN_PAST

    table = StringIO()
    call_command("djqueue_workers", stdout=table)
    lines = {pk: next(line for line in table.getvalue().splitlines() if pk in line)
             for pk in offsets}
    assert re.search(r" \+(89\.9|90\.0|90\.1)\d\d s \(far\) ", lines[ahead_id]), lines
    assert re.search(r" [+-]0\.\d{3} s  ", lines[in_time_id]), lines
    assert "CLOCK" in table.getvalue().splitlines()[0]
    listed = StringIO()
    call_command("djqueue_workers", "--json", stdout=listed)
    rows = {row["id"]: row for row in json.loads(listed.getvalue())}
    assert set(rows[ahead_id]["clock_offsets"]) == {"default"}

    samples = scrape(client)
    metric = {dict(labels)["worker"]: (dict(labels)["database"], value)
              for (name, labels), value in samples.items()
              if name == "djqueue_worker_clock_offset_seconds"}
    assert metric.keys() == set(offsets), metric
    database, value = metric[ahead_id]
    assert database == "default" and 89.5 < value < 90.5, metric

    page = superuser.get(reverse("admin:djqueue_dashboard_changelist")).content.decode()
    row = re.search(rf"<td>{re.escape(ahead_id)}</td>.*?</tr>", page).group(0)
    assert re.search(r'<td class="num">\+(89\.9|90\.0|90\.1)\d\d s \(far\)</td>', row), row


def test_an_http_api_server_ahead_warns_as_it_starts(spawn):
    """Its receives stamp lease ends on its host's clock, as a worker's claims do."""
    server = spawn("djqueue_http", "--port", str(free_port()), env=CLOCK_ENV,
                   prefix=("faketime", "-f", "+90s"))
    wait_until(lambda: "HTTP API server: this host's clock is" in server.output()
               or server.popen.poll() is not None, 60, "the server's start")
    assert re.search(r"HTTP API server: this host's clock is (89\.9|90\.0|90\.1) s ahead of "
                     r"database default's", server.output()), server.output()


def movable_clock(folder: Path) -> tuple[Path, dict[str, str]]:
    """(a file holding a clock offset, "+0s" now; the environment of a process whose
    clock follows it, read again each second, and which compares every 0.5 s)."""
    [library] = glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")
    offset = folder / "offset"
    offset.write_text("+0s\n")
    return offset, {**CLOCK_ENV, "LD_PRELOAD": library, "FAKETIME_TIMESTAMP_FILE": str(offset),
                    "FAKETIME_CACHE_DURATION": "1", "DJQUEUE_TEST_CLOCK_CHECK": "0.5"}


def test_a_clock_set_apart_while_running_is_warned_of_and_its_return_told(spawn, tmp_path):
    """A worker and a long-running reaper compare the clocks from their heartbeat,
    every CLOCK_CHECK_INTERVAL (0.5 s here), not only as they start, and write the
    offset on their rows. Their clocks follow a file libfaketime reads again each
    second."""
    offset, env = movable_clock(tmp_path)
    djqueue.create_queue("f.poison")
    worker = spawn("djqueue_worker", "f.poison", env=env)
    reaper = spawn("djqueue_reaper", env=env)
    processes = {"Worker": worker, "Reaper": reaper}
    # Each compares as it starts, then writes its first line.
    wait_until(lambda: "started on f.poison" in worker.output(), 60, "the worker's start")
    wait_until(lambda: "Reaper started: a pass every 0.2 s over default" in reaper.output(),
               60, "the reaper's start")
    offset.write_text("+90s\n")
    for name, process in processes.items():
        far = re.compile(rf"{name}: this host's clock is (89\.9|90\.0|90\.1) s ahead of "
                         r"database default's")
        wait_until(lambda p=process, f=far: f.search(p.output()), 60, f"the {name}'s warning")
    # Its heartbeat writes the offset it read on its row, and its time by the database's
    # clock (by its own, 90 s ahead, the reaper would find the worker's beats 90 s old).
    for kind in (ProcessKind.WORKER, ProcessKind.REAPER):
        wait_until(lambda k=kind: 89.5 < (Worker.objects.get(kind=k).clock_offset or 0) < 90.5,
                   30, f"the {kind} row showing its clock ahead")
        assert beat_age(kind) < 5, beat_age(kind)
    offset.write_text("+0s\n")
    for name, process in processes.items():
        wait_until(lambda p=process, n=name: f"{n}: this host's clock is back within 1.0 s "
                   f"of database default's" in p.output(), 60, f"the {name}'s all clear")
        # As it started, on the true clock, it said nothing of it.
        before = process.output().split("clock is", 1)[0]
        assert "started" in before and "clock" not in before, process.output()
    for kind in (ProcessKind.WORKER, ProcessKind.REAPER):
        wait_until(lambda k=kind: abs(Worker.objects.get(kind=k).clock_offset or 99)
                   < host_clock.WARN_PAST, 30, f"the {kind} row showing its clock back")
        assert beat_age(kind) < 5, beat_age(kind)


def beat_age(kind: ProcessKind) -> float:
    """Seconds from the process's last heartbeat to now, by this (true) clock."""
    return abs((timezone.now() - Worker.objects.get(kind=kind).heartbeat_at).total_seconds())


def test_an_http_api_servers_heartbeat_compares_the_clocks_again(spawn, tmp_path):
    """The API server compares as it starts (above), then from the heartbeat its first
    long poll starts, as a worker does."""
    offset, env = movable_clock(tmp_path)
    server = start_api_server(spawn, env=env)
    djqueue.create_queue("h.clock")
    client = ApiClient.objects.create(name="svc-clock")
    access.grant(client, "h.clock", ApiPermission.FULL_CONTROL)
    with server.client(access.issue_token(client)) as http:
        answer = http.post("queues/h.clock/receive", json={"wait": 0.1})
    assert answer.status_code == 200 and answer.json() == {"messages": []}, answer.text
    wait_until(Worker.objects.filter(kind=ProcessKind.HTTP).exists, 30, "its registration")
    assert "clock is" not in server.output(), server.output()  # its start, on the true clock
    offset.write_text("+90s\n")
    wait_until(lambda: re.search(r"HTTP API server: this host's clock is (89\.9|90\.0|90\.1) s "
                                 r"ahead of database default's", server.output()),
               60, "its warning")
    offset.write_text("+0s\n")
    wait_until(lambda: "HTTP API server: this host's clock is back within 1.0 s of database "
               "default's" in server.output(), 60, "its all clear")
    # Its heartbeat writes the offset it read on its row, as a worker's does.
    wait_until(lambda: abs(Worker.objects.get(kind=ProcessKind.HTTP).clock_offset or 99)
               < host_clock.WARN_PAST, 30, "its row showing its clock")


def test_a_worker_behind_keeps_its_claim_and_its_row_through_a_reaper_pass(spawn):
    """A worker 90 s behind stamps its lease's end and its heartbeats by the database's
    clock, so a reaper on the true clock neither returns its claim (a 30 s lease) nor
    counts it dead (WORKER_TIMEOUT 5 s): by the worker's own clock both would be 90 s
    old, and its message delivered a second time."""
    djqueue.create_queue("t.slow", visibility_timeout=30)
    sent = djqueue.send("t.slow", {"n": 1, "sleep": 600})  # held until the test ends
    behind = spawn("djqueue_worker", "t.slow", env=CLOCK_ENV, prefix=("faketime", "-f", "-90s"))
    worker_id = wait_until(lambda: re.search(r"Worker (\S+) started on t\.slow",
                                             behind.output()), 60, "its start").group(1)
    wait_until(lambda: Effect.objects.filter(key=-1).exists(), 60, "the handler's start")
    claimed = Message.objects.get(pk=sent.pk)
    assert claimed.state == State.CLAIMED and claimed.owner == worker_id
    lease_left = (claimed.visible_at - timezone.now()).total_seconds()
    assert 20 < lease_left < 31, lease_left
    beat = Worker.objects.get(pk=worker_id).heartbeat_at
    assert abs((timezone.now() - beat).total_seconds()) < 5, beat

    report = Reaper().once()
    assert (report.dead_workers, report.expired, report.returned_from_dead) == (0, 0, 0), report
    again = Message.objects.get(pk=sent.pk)
    assert (again.state, again.attempts, again.owner) == (State.CLAIMED, 1, worker_id)
    assert Worker.objects.filter(pk=worker_id).exists()


def test_a_reaper_ahead_makes_delayed_messages_ready_by_the_databases_clock(spawn):
    """A reaper 90 s ahead makes ready the message whose delay has passed, and leaves the
    one with a minute to go: by its own clock that one's time would have come."""
    djqueue.create_queue("t.record")
    due = djqueue.send("t.record", {"n": 1}, delay=0.2)
    later = djqueue.send("t.record", {"n": 2}, delay=60)
    wait_until(lambda: timezone.now() > due.visible_at, 10, "the first delay to pass")
    ahead = spawn("djqueue_reaper", "--once", env=CLOCK_ENV, prefix=("faketime", "-f", "+90s"))
    assert ahead.wait(60) == 0, ahead.output()
    assert "s ahead of database default's" in ahead.output(), ahead.output()
    states = dict(Message.objects.filter(pk__in=[due.pk, later.pk]).values_list("pk", "state"))
    assert states == {due.pk: State.READY, later.pk: State.SCHEDULED}, states


def test_a_waiting_receive_behind_stamps_its_lease_by_the_databases_clock(spawn):
    """A process that waits in ``receive()`` compares the clocks as its receiver row is
    written, so the lease of what it then receives ends by the database's clock: 30 s on,
    not 60 s past as its own clock, 90 s behind, would have it."""
    djqueue.create_queue("t.record", visibility_timeout=30)
    code = ("import djqueue; [m] = djqueue.receive('t.record', wait=60); "
            "print('received', m.id, flush=True)")
    behind = spawn("shell", "-c", code, env=CLOCK_ENV, prefix=("faketime", "-f", "-90s"))
    row = wait_until(lambda: Worker.objects.filter(
        kind=ProcessKind.RECEIVE, queues=["t.record"]).exclude(clock_offset=None).first(), 60,
        "the receiver's row, naming its queue, with its clock")
    assert -90.5 < row.clock_offset < -89.5, row.clock_offset
    sent = djqueue.send("t.record", {"n": 1})
    assert behind.wait(60) == 0, behind.output()
    assert f"received {sent.pk}" in behind.output(), behind.output()
    assert behind.output().count("s behind database default's") == 1, behind.output()
    lease_left = (Message.objects.get(pk=sent.pk).visible_at - timezone.now()).total_seconds()
    assert 20 < lease_left < 31, lease_left


def test_a_process_that_sends_and_receives_without_waiting_goes_by_the_databases_clock(spawn):
    """A process that runs no worker, reaper or waiting receive (a web process) compares
    the clocks as it first needs the database's time: a shell 90 s behind delays its
    send by a minute of the database's clock, not 30 s into the past, and the lease of
    what it receives without waiting ends 30 s on, not 60 s past. It warns once."""
    djqueue.create_queue("t.record", visibility_timeout=30)
    waiting = djqueue.send("t.record", {"n": 1})
    code = ("import djqueue; [m] = djqueue.receive('t.record'); "
            "s = djqueue.send('t.record', {'n': 2}, delay=60); print('ids', m.id, s.id)")
    behind = spawn("shell", "-c", code, env=CLOCK_ENV, prefix=("faketime", "-f", "-90s"))
    assert behind.wait(60) == 0, behind.output()
    received, delayed = map(int, re.search(r"ids (\d+) (\d+)", behind.output()).groups())
    assert received == waiting.pk, behind.output()
    times = dict(Message.objects.filter(pk__in=[received, delayed]).values_list(
        "pk", "visible_at"))
    lease_left = (times[received] - timezone.now()).total_seconds()
    delay_left = (times[delayed] - timezone.now()).total_seconds()
    assert 20 < lease_left < 31 and 50 < delay_left < 61, (lease_left, delay_left)
    assert re.search(r"Process \d+: this host's clock is (89\.9|90\.0|90\.1) s behind "
                     r"database default's", behind.output()), behind.output()
    assert behind.output().count("this host's clock is") == 1, behind.output()
