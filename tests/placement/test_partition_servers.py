"""A queue partitioned over three MariaDB servers of its own (started here, on loopback
ports), with four producer and four worker processes; one server is killed (-9) mid-run
and started again ten seconds later."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import ROOT, wait_until
from tests.faults.server import PrivateMariaDB

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.mysql_only, pytest.mark.slow]
PORTS = os.environ.get("DJQUEUE_SPREAD_PORTS", "3311,3312,3313")
# `make test` sends 8,000 messages; `make soak` the full 60,000 (DJQUEUE_SPREAD_TOTAL),
# which takes 10 minutes or more on two busy cores. The server is killed once a
# twentieth of the messages have run on it, while the producers still send (checked).
TOTAL = int(os.environ.get("DJQUEUE_SPREAD_TOTAL", "8000"))
PRODUCERS, KEYED_EVERY, KEYS = 4, 3, 50


@pytest.fixture(scope="module")
def servers() -> Iterator[list[PrivateMariaDB]]:
    # Committed transactions survive a kill -9 of the server with the log flushed to the
    # OS at each commit (2) as with an fsync (1); the test then runs faster.
    started = [PrivateMariaDB(ROOT / "var" / f"partition-{i}", int(port),
                              flush_log_at_trx_commit=2)
               for i, port in enumerate(PORTS.split(","), start=1)]
    try:
        for server in started:
            server.install()
            server.start()
            server.recreate("parts")
        yield started
    finally:
        for server in started:
            server.stop()


SPREAD_ENV = {"DJQUEUE_TEST_SPREAD_PORTS": PORTS}


def effects(server: PrivateMariaDB) -> list[tuple[int, int, datetime]]:
    """(id, n, at) of every effect on a partition's server, in id order."""
    conn = server.connect("parts")
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT id, `key`, at FROM tests_effect ORDER BY id")
        return [(i, n, at.replace(tzinfo=UTC)) for i, n, at in cursor.fetchall()]
    finally:
        conn.close()


def count(server: PrivateMariaDB, table: str) -> int:
    conn = server.connect("parts")
    try:
        cursor = conn.cursor()
        cursor.execute(f"SELECT COUNT(*) FROM {table}")
        return cursor.fetchone()[0]
    finally:
        conn.close()


def pending(server: PrivateMariaDB) -> int:
    return count(server, "djqueue_message")


def finished(servers: list[PrivateMariaDB]) -> int:
    """Effects recorded on all the servers: how far the run has come."""
    return sum(count(s, "tests_effect") for s in servers)


def test_kill_9_of_a_partition_loses_nothing_and_the_others_flow_on(servers, spawn):
    migrations = [spawn("migrate", "--database", f"s{i}", "--run-syncdb", "--noinput", "-v0",
                        env=SPREAD_ENV) for i in range(1, 4)]
    for done in migrations:
        assert done.wait(600) == 0, done.output()
    created = spawn("shell", "-c", "import djqueue; djqueue.create_queue('spread.work', "
                    "ordered=True, exactly_once=True)", env=SPREAD_ENV)
    assert created.wait(120) == 0, created.output()
    reaper = spawn("djqueue_reaper", env=SPREAD_ENV)
    workers = [spawn("djqueue_worker", "spread.work", "-c", "4", "-b", "20", env=SPREAD_ENV)
               for _ in range(4)]
    share = TOTAL // PRODUCERS
    producers = [spawn("produce", "spread.work", "--start", str(i * share), "--count",
                       str(share), "--keyed-every", str(KEYED_EVERY), "--keys", str(KEYS),
                       env=SPREAD_ENV) for i in range(PRODUCERS)]
    victim = servers[1]
    wait_until(lambda: count(victim, "tests_effect") >= TOTAL // 20, 300, "the run under way",
               interval=0.2)
    sending = sum(producer.popen.poll() is None for producer in producers)
    victim.crash()
    killed_at = datetime.now(UTC)
    time.sleep(10)  # the scenario's outage: ten seconds without partition s2
    victim.start()
    restarted_at = datetime.now(UTC)
    # How long the sends take depends on the machine; what fails the test is a run that
    # stops moving for two minutes.
    def progress() -> int:
        return finished(servers)

    assert sending, "the producers had sent everything before the kill"
    for producer in producers:
        assert producer.wait(120, progress=progress) == 0, producer.output()
    wait_until(lambda: progress() >= TOTAL, 120, "every message processed", interval=0.5,
               progress=progress)
    wait_until(lambda: sum(pending(s) for s in servers) == 0, 120, "nothing left")
    for process in (*workers, reaper):
        assert process.popen.poll() is None, process.output()

    found = {s.port: effects(s) for s in servers}
    done = sorted(n for rows in found.values() for _, n, _ in rows)
    assert done == list(range(TOTAL)), "lost or processed twice"
    # A key's messages, on one partition, ran in the order they were sent.
    by_key: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for port, rows in found.items():
        for row_id, n, _ in rows:
            if n % KEYED_EVERY == 0:
                start = n // (TOTAL // PRODUCERS) * (TOTAL // PRODUCERS)
                by_key[f"p{start}-{(n // KEYED_EVERY) % KEYS}"].append((port, row_id, n))
    for key, runs in by_key.items():
        assert len({port for port, _, _ in runs}) == 1, f"key {key} on several partitions"
        assert [n for _, _, n in sorted(runs)] == sorted(n for _, _, n in runs), key
    # The other partitions went on while s2 was down: something finished every second.
    live = [at for s in servers if s is not victim for _, _, at in found[s.port]]
    seconds = int((restarted_at - killed_at).total_seconds())
    per_second = [sum(1 for at in live if killed_at + timedelta(seconds=i) <= at
                      < killed_at + timedelta(seconds=i + 1)) for i in range(seconds)]
    assert all(per_second), f"throughput fell to zero while s2 was down: {per_second}"
    assert any(at > restarted_at for _, _, at in found[victim.port]), (
        "s2's messages were processed after its restart")
    print(f"finished per second while s2 was down: {per_second}; producers still sending "
          f"at the kill: {sending} of {PRODUCERS}")
