"""What a worker logs while its database does not answer (djqueue.storage.failure_streaks):
each repeating failure's first with its traceback, then a line at most every 10 s, and
one line when it works again. Before, a 10 s outage wrote 803 lines, a traceback for
every failed claim, queue lookup and heartbeat. A real worker whose database is
reached through a forwarder the test closes and opens again."""

from __future__ import annotations

import logging
import re
import signal
import time

import pytest
from django.db import connection

import djqueue
from djqueue.storage import failure_streaks
from djqueue.storage.failure_streaks import FailureStreak
from tests.conftest import wait_until
from tests.servers import free_port, tcp_forward

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_outage_is_logged_once_with_a_traceback_and_its_end_once(spawn):
    if connection.vendor == "sqlite":
        pytest.skip("an SQLite database is a file: it has no outage")
    if connection.settings_dict["OPTIONS"].get("pool"):
        pytest.skip("under Django's pool each try waits the pool's 30 s: one failure in 4 s")
    djqueue.create_queue("t.record")
    port = free_port()
    env = {"DJQUEUE_TEST_DB_PORT": str(port), "DJQUEUE_TEST_LOG_INFO": "1"}
    with tcp_forward(port, int(connection.settings_dict["PORT"])):
        worker = spawn("djqueue_worker", "t.record", env=env)
        wait_until(lambda: "started on t.record" in worker.output()
                   or worker.popen.poll() is not None, 60, "the worker's start")
    down = time.monotonic()  # beats every 0.5 s here: several fail in the next 4 s
    wait_until(lambda: "Heartbeat on default failed; the next beat tries again"
               in worker.output(), 30, "the first failed heartbeat")
    wait_until(lambda: time.monotonic() - down > 4, 30, "4 s of outage")
    with tcp_forward(port, int(connection.settings_dict["PORT"])):
        ended = re.compile(r"Heartbeat on default works again after [\d.]+ s \((\d+) failures\)")
        found = wait_until(lambda: ended.search(worker.output()), 60, "the heartbeat's return")
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0, worker.output()
    log = worker.log.read_text()  # all of it (output() is its end)
    assert int(found.group(1)) >= 4, log
    # One traceback for each streak's first failure, none for the ones that followed.
    first = re.compile(r"(Heartbeat on \S+|Claim on database \S+|Looking up the queues) "
                       r"failed; ")
    lines = log.splitlines()
    firsts = [first.match(line).group(1) for line in lines if first.match(line)]
    assert firsts.count("Heartbeat on default") == 1, log
    # A logged traceback follows its record's line (a chained one, a blank line): each
    # follows a streak's first line.
    logged = [lines[i - 1] for i, line in enumerate(lines)
              if line.startswith("Traceback (most recent call last)") and lines[i - 1].strip()]
    assert len(logged) == len(firsts) and all(first.match(line) for line in logged), log
    assert len(log.splitlines()) < 300, log


def test_a_streak_says_how_long_and_how_often_at_most_every_interval(caplog, monkeypatch):
    logger = logging.getLogger("tests.streaks")
    streak = FailureStreak(logger, "Claim on database x")
    caplog.set_level(logging.INFO, logger="tests.streaks")
    for _ in range(3):
        streak.failed(ConnectionError("refused\n  twice"), "leaving it for 1 s")
    monkeypatch.setattr(failure_streaks, "REPEAT_EVERY", 0.0)
    streak.failed(ConnectionError("refused\n  twice"), "leaving it for 1 s")
    streak.succeeded()
    streak.succeeded()  # no streak: nothing more
    streak.failed(ValueError(""), "leaving it for 1 s")
    lines = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines[0] == ("ERROR", "Claim on database x failed; leaving it for 1 s", True)
    assert re.fullmatch(r"Claim on database x still failing after 0 s \(4 failures\); leaving "
                        r"it for 1 s: refused twice", lines[1][1]) and not lines[1][2]
    assert re.fullmatch(r"Claim on database x works again after [\d.]+ s \(4 failures\)",
                        lines[2][1]) and lines[2][0] == "WARNING"
    assert lines[3] == ("ERROR", "Claim on database x failed; leaving it for 1 s", True)
    assert len(lines) == 4
