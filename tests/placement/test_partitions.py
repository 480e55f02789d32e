"""A queue partitioned over three databases (here on one server): where messages go,
receiving from all of them, the layout changing at run time, a worker serving it."""

from __future__ import annotations

import concurrent.futures
import signal
import zlib
from collections import Counter

import pytest
from django.db import connections

import djqueue
from djqueue.exceptions import ConfigurationError, PartitionUnavailable
from djqueue.models import History, Message, Queue, State, Worker
from djqueue.monitoring import queue_listing
from djqueue.storage import partition_layout, partitions
from tests.api.test_hostile_arguments import CALLS, odd_arguments_get_djqueues_own_errors
from tests.conftest import wait_until
from tests.models import Effect
from tests.placement.conftest import PLACED_ENV, PLACEMENT_DATABASES

pytestmark = PLACEMENT_DATABASES
PARTS = ["queues", "p2", "p3"]


def per_partition(name: str) -> dict[str, int]:
    return {db: Message.objects.using(db).filter(queue__name=name).count() for db in PARTS}


def test_a_ruled_queue_is_created_on_every_partition_with_a_directory_at_home():
    directory = djqueue.create_queue("parted.a", max_attempts=3)
    assert directory.partitions == PARTS and directory._state.db == "default"
    for db in PARTS:
        row = Queue.objects.using(db).get(name="parted.a")
        assert row.max_attempts == 3 and row.partitions is None
    assert djqueue.get_queue("parted.a").partitions == PARTS


def test_keys_keep_their_partition_and_keyless_messages_spread():
    djqueue.create_queue("parted.b")
    keys = [f"k{i}" for i in range(30)]
    for key in keys:
        for n in range(3):
            djqueue.send("parted.b", {"key": key, "n": n}, group_key=key)
    for key in keys:
        home = PARTS[zlib.crc32(key.encode()) % 3]
        rows = Message.objects.using(home).filter(group_key=key)
        assert [m.payload["n"] for m in rows.order_by("id")] == [0, 1, 2]
    before = per_partition("parted.b")
    djqueue.send_batch("parted.b", [{"n": i} for i in range(30)])
    for _ in range(30):
        djqueue.send("parted.b", {"single": True})
    added = {db: per_partition("parted.b")[db] - before[db] for db in PARTS}
    assert sum(added.values()) == 60 and all(n >= 10 for n in added.values()), added
    mixed = djqueue.send_batch("parted.b", [{"n": i} for i in range(4)],
                               group_keys=["k1", None, "k2", "k1"])
    assert [m.payload["n"] for m in mixed] == [0, 1, 2, 3]
    assert mixed[0]._state.db == mixed[3]._state.db == PARTS[zlib.crc32(b"k1") % 3]


def test_the_queue_list_has_a_row_for_each_database_and_one_sum_for_the_queue():
    djqueue.create_queue("parted.listed")
    djqueue.send_batch("parted.listed", [{"n": i} for i in range(30)])
    queue_listing.sample_now()
    rows, more = queue_listing.queue_rows(prefix="parted.listed", fresh=True)
    assert [r["database"] for r in rows] == ["default", *PARTS] and not more
    assert sum(r["ready"] or 0 for r in rows) == 30
    [combined] = queue_listing.by_queue(rows)
    assert (combined["name"], combined["ready"], combined["in_flight"]) == (
        "parted.listed", 30, 0)
    assert "database" not in combined and combined["sample_age"] >= 0


def test_receive_takes_from_every_partition_and_acks_where_each_lives():
    djqueue.create_queue("parted.c")
    djqueue.send_batch("parted.c", [{"n": i} for i in range(30)])
    got = []
    while True:
        batch = djqueue.receive("parted.c", max_messages=7)
        if not batch:
            break
        for message in batch:
            message.ack()
        got += batch
    assert sorted(m.payload["n"] for m in got) == list(range(30))
    assert Counter(m._state.db for m in got) == Counter(
        {db: History.objects.using(db).count() for db in PARTS})
    assert sum(History.objects.using(db).count() for db in PARTS) == 30
    assert len(djqueue.peek("parted.c")) == 0
    djqueue.send_batch("parted.c", [{"n": i} for i in range(9)])
    assert len(djqueue.peek("parted.c")) == 9
    djqueue.pause("parted.c")
    assert all(Queue.objects.using(db).get(name="parted.c").paused for db in PARTS)
    assert djqueue.receive("parted.c") == []
    djqueue.resume("parted.c")
    assert djqueue.purge("parted.c") == 9


def test_a_partition_added_takes_new_messages_and_a_removed_one_drains_first():
    djqueue.create_queue("parted.d", partitions=["queues", "p2"])
    djqueue.send_batch("parted.d", [{"n": 1}])
    djqueue.send("parted.d", {"n": 2})
    assert per_partition("parted.d")["p3"] == 0
    djqueue.add_partition("parted.d", "p3")
    for n in range(9):
        djqueue.send("parted.d", {"n": n})
    assert per_partition("parted.d")["p3"] == 3
    djqueue.remove_partition("parted.d", "p2")
    layout = djqueue.get_queue("parted.d", fresh=True)
    assert layout.partitions == ["queues", "p3"] and layout.draining_partitions == ["p2"]
    left_on_p2 = per_partition("parted.d")["p2"]
    for n in range(10):
        djqueue.send("parted.d", {"n": n})
    assert per_partition("parted.d")["p2"] == left_on_p2, "a draining partition took more"
    assert partition_layout.drop_drained() == 0  # p2 still holds messages
    while batch := djqueue.receive("parted.d", max_messages=10):
        for message in batch:
            message.ack()
    assert partition_layout.drop_drained() == 1
    assert djqueue.get_queue("parted.d", fresh=True).draining_partitions == []
    with pytest.raises(ConfigurationError, match="not a database djqueue keeps"):
        djqueue.add_partition("parted.d", "nowhere")


def test_a_partition_that_does_not_answer_is_passed_over_and_keys_for_it_fail():
    djqueue.create_queue("parted.e")
    down = "p2"
    connections[down].close()
    settings = connections[down].settings_dict
    real = dict(settings)
    settings["PORT"] = "1"  # nothing listens there
    if connections[down].vendor == "sqlite":
        settings["NAME"] = "/nonexistent/partition.sqlite3"
    try:
        for n in range(12):
            djqueue.send("parted.e", {"n": n})
        key = next(k for k in (f"k{i}" for i in range(100))
                   if PARTS[zlib.crc32(k.encode()) % 3] == down)
        with pytest.raises(PartitionUnavailable, match="does not answer"):
            djqueue.send("parted.e", {"keyed": True}, group_key=key)
        got = djqueue.receive("parted.e", max_messages=20)
    finally:
        connections[down].close()
        settings.update(real)
        partitions._down.clear()
    assert len(got) == 12 and {m._state.db for m in got} <= {"queues", "p3"}
    assert Message.objects.using(down).count() == 0


def test_a_worker_serves_every_partition_and_registers_on_each(spawn):
    djqueue.create_queue("parted.work")
    djqueue.send_batch("parted.work", [{"n": i} for i in range(300)])
    worker = spawn("djqueue_worker", "parted.work", "-c", "2", "-b", "20", env=PLACED_ENV)
    wait_until(lambda: sum(History.objects.using(db).count() for db in PARTS) == 300, 60,
               "every partition drained")
    assert sorted(Effect.objects.values_list("key", flat=True)) == list(range(300))
    assert all(Worker.objects.using(db).exists() for db in PARTS)
    assert all(Message.objects.using(db).filter(state=State.READY).count() == 0 for db in PARTS)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()


def test_metrics_show_a_partitioned_queue_once_with_its_partitions_added_up():
    from djqueue.monitoring import prometheus, rollups
    from djqueue.storage import dialects

    djqueue.create_queue("parted.m")
    djqueue.send_batch("parted.m", [{"n": i} for i in range(9)])
    for db in ["default", *PARTS]:
        with dialects.using(db):
            rollups.sample_depth()
    families = {f.name: f for f in prometheus.DjqueueCollector().collect()}
    ready = [s for s in families["djqueue_queue_messages"].samples
             if s.labels == {"queue": "parted.m", "state": "ready"}]
    assert [s.value for s in ready] == [9.0]
    paused = [s for s in families["djqueue_queue_paused"].samples
              if s.labels["queue"] == "parted.m"]
    assert len(paused) == 1


def token_for(queue: str) -> str:
    """A token of a client with full control of ``queue``."""
    from djqueue.http import access
    from djqueue.models import ApiClient, ApiPermission

    client = ApiClient.objects.create(name="svc")
    access.grant(client, queue, ApiPermission.FULL_CONTROL)
    return access.issue_token(client)


def test_the_http_api_sends_receives_and_acks_on_a_partitioned_queue(spawn):
    from tests.http.conftest import start_api_server

    djqueue.create_queue("parted.http")
    http = start_api_server(spawn, env=PLACED_ENV).client(token_for("parted.http"))
    base = "queues/parted.http"
    for n in range(3):  # each batch to the next partition
        sent = http.post(f"{base}/messages", json={"messages": [{"payload": n}] * 4})
        assert sent.status_code == 201, sent.text
    got = []
    while batch := http.post(f"{base}/receive", json={"max_messages": 10}).json()["messages"]:
        got += batch
    assert len(got) == 12
    acked = http.post(f"{base}/ack", json={"receipts": [m["receipt"] for m in got]})
    assert acked.status_code == 200, acked.text
    assert sum(History.objects.using(db).count() for db in PARTS) == 12
    assert all(History.objects.using(db).count() == 4 for db in PARTS)


def test_a_send_to_a_partitioned_queue_wakes_an_http_long_poll_on_it(spawn):
    from djqueue.api.worker_wakeups import wake_addresses
    from djqueue.models import ProcessKind
    from tests.http.conftest import start_api_server

    djqueue.create_queue("parted.poll")
    # Polling off: within the long poll's 20 s, the message reaches it only by the
    # send's wake-up, from whichever partition's database it was stored on.
    server = start_api_server(spawn, env={**PLACED_ENV, "DJQUEUE_TEST_POLL": "60"})
    with server.client(token_for("parted.poll")) as waiting, \
            concurrent.futures.ThreadPoolExecutor(1) as thread:
        answer = thread.submit(waiting.post, "queues/parted.poll/receive", json={"wait": 20})
        wait_until(lambda: all(any("parted.poll" in row.queues for row in Worker.objects
                                   .using(db).filter(kind=ProcessKind.HTTP)) for db in PARTS),
                   30, "the server to list the queue on every partition's database")
        wake_addresses.forget()
        sent = djqueue.send("parted.poll", {"n": 1}, group_key="k1")
        got = answer.result(30)
    assert got.status_code == 200, got.text
    assert [(m["id"], m["payload"]) for m in got.json()["messages"]] == [(sent.pk, {"n": 1})]


def test_the_http_servers_poll_reads_each_partitions_database():
    """The API server's idle poll (djqueue.api.receiving.queues_to_claim_from) finds a
    message on whichever partition it was stored, and none on a queue whose partitions
    are all empty."""
    from djqueue.api.receiving import queues_to_claim_from

    djqueue.create_queue("parted.found")
    djqueue.create_queue("parted.none")
    assert queues_to_claim_from(["parted.found", "parted.none"]) == set()
    for key in ("k1", "k2", "k3", "k4", "k5", "k6"):
        djqueue.send("parted.found", {"n": 1}, group_key=key)
    # Only those stored on the other partitions' databases are left.
    Message.objects.using(PARTS[0]).filter(queue__name="parted.found").delete()
    assert sum(per_partition("parted.found").values()) > 0
    assert queues_to_claim_from(["parted.found", "parted.none"]) == {"parted.found"}


@pytest.mark.parametrize("keys", [{"group_key": 5}, {"group_key": "a\x00b"},
                                  {"dedup_key": ["x"]}, {"group_key": "k" * 500}])
def test_bad_keys_for_a_partitioned_queue_are_refused_before_routing(keys):
    from djqueue.exceptions import InvalidMessage

    djqueue.create_queue("parted.bad")
    with pytest.raises(InvalidMessage):
        djqueue.send("parted.bad", {"n": 1}, **keys)
    assert not any(per_partition("parted.bad").values())


@pytest.mark.parametrize("bad", [
    {"payloads": [{"n": 1}, {"n": 2}, {1, 2}]},  # a payload JSON cannot hold
    {"payloads": [{"n": 1}, {"n": 2}, "x" * 300_000]},  # over the queue's size limit
    {"payloads": [{"n": 1}, {"n": 2}, {"n": 3}], "priority": "high"},
    {"payloads": [{"n": 1}, {"n": 2}, {"n": 3}], "timeout": "soon", "block": True},
])
def test_a_batch_with_bad_input_for_a_partitioned_queue_sends_nothing_on_any_partition(bad):
    """Refused before routing: keys on different partitions are one transaction each,
    so an error found in the second would come after the first had committed."""
    from djqueue.exceptions import InvalidMessage, PayloadTooLarge

    djqueue.create_queue("parted.batch", max_payload_bytes=100_000)
    # The last payload's key on a partition of its own, whose batch is sent last.
    first = PARTS[zlib.crc32(b"k0") % 3]
    other = next(f"k{n}" for n in range(1, 50) if PARTS[zlib.crc32(f"k{n}".encode()) % 3] != first)
    keys = ["k0", "k0", other]
    with pytest.raises((InvalidMessage, PayloadTooLarge)) as refused:
        djqueue.send_batch("parted.batch", group_keys=keys, **bad)
    assert not any(per_partition("parted.batch").values())
    if "timeout" in bad:
        assert str(refused.value).startswith("timeout must be")


@pytest.mark.parametrize(("call", "said"), [
    (lambda: djqueue.send("parted.args", {"n": 1}, block=True, timeout="soon"),
     "timeout must be seconds"),
    (lambda: djqueue.send("parted.args", {"n": 1}, group_key="k", block=True, timeout=-1),
     "timeout must be 0 to"),
    (lambda: djqueue.redrive("parted.args", limit="5"), "limit must be a positive integer"),
    (lambda: djqueue.redrive("parted.args", limit=True), "limit must be a positive integer"),
    (lambda: djqueue.add_partition("parted.args", ["p2"]), "a partition is a database alias"),
    (lambda: djqueue.remove_partition("parted.args", 2), "a partition is a database alias"),
])
def test_bad_arguments_for_a_partitioned_queue_get_the_same_errors_as_for_any_queue(call, said):
    from djqueue.exceptions import DjqueueError

    djqueue.create_queue("parted.args")
    with pytest.raises(DjqueueError, match=said):
        call()
    assert not any(per_partition("parted.args").values())
    assert djqueue.get_queue("parted.args", fresh=True).partitions == PARTS


def every_databases_rows() -> tuple:
    return tuple((list(Queue.objects.using(db).order_by("pk").values_list(
                      "pk", "name", "paused", "max_attempts", "partitions")),
                  list(Message.objects.using(db).order_by("pk").values_list(
                      "pk", "state", "attempts")),
                  History.objects.using(db).count())
                 for db in ["default", *PARTS])


@pytest.mark.parametrize("call", CALLS)
def test_an_odd_argument_for_a_partitioned_queue_gets_djqueues_own_error(call):
    """tests/api/test_hostile_arguments.py's calls on a partitioned queue, whose
    calls route to each partition: each odd value is refused before any partition
    changes."""
    djqueue.create_queue("parted.odd")
    odd_arguments_get_djqueues_own_errors(CALLS[call], "parted.odd", every_databases_rows)


def test_drain_with_delayed_runs_every_partitions_delayed_and_retried_messages():
    """djqueue.drain(delayed=True) makes each partition's waiting messages ready: those
    sent with a delay, and failures waiting out a backoff no test would wait for."""
    djqueue.create_queue("parted.work", max_attempts=2, backoff=[600])
    djqueue.send_batch("parted.work", [{"n": i} for i in range(12)], delay=3600)
    for _ in range(3):  # record() needs "n": each of these fails twice, then is dead
        djqueue.send("parted.work", {"bad": True}, delay=3600)
    assert all(per_partition("parted.work").values())  # some on each partition
    assert djqueue.drain("parted.work").runs == 0  # nothing ready yet
    drained = djqueue.drain("parted.work", delayed=True)
    assert (drained.runs, drained.acked, drained.failed, drained.dead_lettered) == (
        18, 12, 6, 3), drained
    assert sorted(Effect.objects.values_list("key", flat=True)) == list(range(12))
    assert sum(History.objects.using(db).count() for db in PARTS) == 12
    dead = [m for db in PARTS for m in Message.objects.using(db).filter(state=State.DEAD)]
    assert len(dead) == 3 and all("KeyError: 'n'" in m.last_error for m in dead)
