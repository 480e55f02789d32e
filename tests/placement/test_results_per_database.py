"""A worker's finished messages are settled on their own databases: one that does not
answer keeps its results for later and the others are settled meanwhile
(djqueue.worker.ack_batches). Before, one partition server's outage made every flush
fail, and each failure paused the worker's loop for half a second."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import OperationalError, connections

import djqueue
from djqueue.models import Message, State
from djqueue.worker.ack_batches import AckBatches, Done, WorkerStats
from djqueue.worker.database_pacing import FIRST_PAUSE, DatabasePacing
from tests.conftest import wait_until
from tests.placement.conftest import PLACEMENT_DATABASES

pytestmark = PLACEMENT_DATABASES


@contextmanager
def unreachable(alias: str) -> Iterator[None]:
    """Database ``alias`` refuses connections for real: its next connection goes to a
    loopback port nothing listens on (to a file in a missing folder, on SQLite)."""
    conn = connections[alias]
    saved = dict(conn.settings_dict)
    conn.close()
    if conn.vendor == "sqlite":
        conn.settings_dict["NAME"] = "/nonexistent/djqueue/unreachable.sqlite3"
    else:
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        conn.settings_dict.update(HOST="127.0.0.1", PORT=port)
    try:
        yield
    finally:
        conn.close()
        conn.settings_dict.clear()
        conn.settings_dict.update(saved)


def received(queue: str) -> Message:
    djqueue.create_queue(queue, exist_ok=True)
    djqueue.send(queue, {"q": queue})
    [message] = djqueue.receive(queue, owner="w")
    return message


def test_a_database_that_does_not_answer_keeps_its_results_and_the_others_are_settled():
    home, placed = received("settle.home"), received("placed.settle")
    acked_home, acked_placed = received("settle.home"), received("placed.settle")
    assert (home._state.db, placed._state.db) == ("default", "queues")
    pacing = DatabasePacing()
    pacing.failed("queues")  # as after a failed claim there
    forgotten: list[int] = []
    results = AckBatches("w", WorkerStats(), forget=lambda m: forgotten.append(m.pk),
                         pacing=pacing)
    for done in (Done(home, error="boom"), Done(placed, error="boom"),
                 Done(acked_home), Done(acked_placed)):
        results.add(done)

    # Left alone (the pacing's pause): its results are not due and not tried.
    assert results.flush() == {}
    assert [d.message for d in results.unflushed] == [placed, acked_placed]
    assert results.due(batch_size=100) is None, "a database left alone wakes no one"
    assert sorted(forgotten) == sorted([home.pk, acked_home.pk])
    assert Message.objects.get(pk=home.pk).state == State.SCHEDULED  # its retry, after backoff
    assert djqueue.finished(acked_home.pk, queue="settle.home") is not None

    # Its pause over (a claim there answered), but its server down again: the error is
    # returned, nothing is lost, and the database is left alone once more.
    pacing.claimed("queues", several=True, asked=1, found=0, acked=False)
    with unreachable("queues"):
        failed = results.flush()
    assert list(failed) == ["queues"] and isinstance(failed["queues"], OperationalError)
    assert [d.message for d in results.unflushed] == [placed, acked_placed]
    assert pacing.left_alone() == {"queues"} and results.due(batch_size=100) is None

    # Back, once its pause has run out (no claim there in between): settled where they
    # live, and that settlement ends its series of failures.
    wait_until(lambda: not pacing.left_alone(), FIRST_PAUSE + 5, "its failure pause ran out")
    assert results.flush() == {}
    assert not results.unflushed
    row = Message.objects.using("queues").get(pk=placed.pk)
    assert (row.state, row.last_error) == (State.SCHEDULED, "boom")
    assert djqueue.finished(acked_placed.pk, queue="placed.settle") is not None
    assert results.stats.acked == 2 and results.stats.failed == 2
    assert pacing.failed("queues") == FIRST_PAUSE, "the next failure pauses it afresh"
