"""Fault injectors for the scenarios, and the timing of each fault's recovery."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import MySQLdb

if TYPE_CHECKING:
    from tests.faults.harness import Cluster


@dataclass
class Fault:
    kind: str
    at: float  # wall clock
    detail: str
    recovery: float | None = None


def watch(until: Callable[[], bool], timeout: float, interval: float = 0.05) -> float | None:
    """Seconds until ``until()`` held, or None after ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if until():
                return time.monotonic() - started
        except MySQLdb.OperationalError:
            pass
        time.sleep(interval)
    return None


class Injection:
    """What a fault injector gets: the stop signal, the faults list, and a way to time
    each fault's recovery on a watcher thread that ``drain`` joins before it accounts."""

    def __init__(self, cluster: Cluster, queue_id: int) -> None:
        self.cluster, self.queue_id = cluster, queue_id
        self.stop = threading.Event()
        self.produced = threading.Event()  # every producer has exited
        self.faults: list[Fault] = []
        self._watchers: list[threading.Thread] = []

    def record(self, fault: Fault, recovered: Callable[[], bool] | None = None,
               timeout: float = 60) -> None:
        """Add ``fault``; with ``recovered``, time until it holds (or the queue settles)."""
        self.faults.append(fault)
        if recovered is None:
            return

        def run() -> None:
            fault.recovery = watch(lambda: recovered() or self.settled(), timeout)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._watchers.append(thread)

    def settled(self) -> bool:
        """Nothing more can happen: the producers are done and nothing is pending."""
        return self.produced.is_set() and self.cluster.pending(self.queue_id) == 0

    def effects(self) -> int:
        return self.cluster.query("SELECT COALESCE(MAX(id), 0) FROM tests_effect")[0][0]

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._watchers:
            thread.join(max(0.0, deadline - time.monotonic()))


# Fault injectors: each runs on a thread until ``inj.stop`` is set.

def kill_storm(cluster: Cluster, queue: str, worker_options: tuple[str, ...],
               inj: Injection, rng: random.Random) -> None:
    """SIGKILL a random worker every 0.5 to 2 s and start another in its place."""
    while not inj.stop.wait(rng.uniform(0.5, 2.0)):
        workers = cluster.alive("worker")
        if not workers:
            continue
        victim = rng.choice(workers)
        owner, held = cluster.held_by_worker_pid(victim.pid)
        victim.kill()
        victim.wait(10)
        fault = Fault("worker SIGKILL", time.time(), f"pid {victim.pid} holding {held}")
        cluster.worker(queue, *worker_options)
        if owner is None or not held:  # killed before it registered, or holding nothing
            fault.recovery = 0.0
            inj.record(fault)
        else:
            inj.record(fault, lambda owner=owner: cluster.query(
                "SELECT COUNT(*) FROM djqueue_message WHERE owner = %s AND state = 3",
                (owner,))[0][0] == 0)


def database_crashes(cluster: Cluster, times: list[float], downtime: float,
                     inj: Injection) -> None:
    """kill -9 the server at each of ``times`` (seconds from now), restart it after
    ``downtime``; recovery is the time from the restart until a handler's effect lands."""
    started = time.monotonic()
    for at in times:
        if inj.stop.wait(max(0.0, started + at - time.monotonic())):
            return
        before = inj.effects()
        fault = Fault("database kill -9", time.time(), f"restart after {downtime:g} s")
        cluster.server.crash()
        time.sleep(downtime)
        cluster.server.start()
        fault.recovery = watch(lambda b=before: inj.effects() > b or inj.settled(), 120)
        inj.record(fault)


def connection_kills(cluster: Cluster, inj: Injection, rng: random.Random) -> None:
    """KILL CONNECTION a random client connection every 0.5 to 2 s. When it held a worker's
    session lock, recovery is the time until that worker's claims were back (returned
    by the reaper, or settled); otherwise the time until a handler's next effect."""
    while not inj.stop.wait(rng.uniform(0.5, 2.0)):
        locks = {row[0]: row[1] for row in cluster.query(
            "SELECT IS_USED_LOCK(CONCAT('djqueue:', lock_key)), id FROM djqueue_worker")
            if row[0] is not None}
        ids = [row[0] for row in cluster.query(
            "SELECT id FROM information_schema.processlist WHERE db = 'faults' AND "
            "id <> CONNECTION_ID() AND command <> 'Daemon'")]
        if not ids:
            continue
        victim = rng.choice(ids)
        owner = locks.get(victim)
        before = inj.effects()
        try:
            # Not retried: a victim that closed meanwhile (the harness's own short polls
            # do) answers "Unknown thread id" every time, and retrying that for a minute
            # silently ended the storm before it began.
            cluster.query("KILL CONNECTION %s", (victim,), retry_for=0)
        except MySQLdb.OperationalError:
            continue  # it was gone already
        fault = Fault("KILL CONNECTION", time.time(),
                      f"worker {owner}'s session lock" if owner else "a client connection")
        if owner is not None:
            inj.record(fault, lambda owner=owner: cluster.query(
                "SELECT COUNT(*) FROM djqueue_message WHERE owner = %s AND state = 3",
                (owner,))[0][0] == 0)
        else:
            inj.record(fault, lambda before=before: inj.effects() > before)

