"""Topics with consumer groups: cluster and broadcast delivery, replay, lag, body store."""

import json
import threading
from collections import Counter

import pytest
from django.utils import timezone

import djqueue
from djqueue.api.topics import collect_bodies
from djqueue.exceptions import ConfigurationError, InvalidMessage, QueueNotFound
from djqueue.models import Body, ConsumerGroup, Message
from tests.conftest import in_threads, wait_until
from tests.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)

TOTAL = 10_000


def consume_until(queue: str, done: threading.Event, seen: list, expected_total: int,
                  counter: Counter, lock: threading.Lock, stop: threading.Event) -> None:
    while not stop.is_set():
        got = djqueue.receive(queue, max_messages=100, wait=0.2)
        if got:
            seen.extend(m.payload["n"] for m in got)
            assert len(djqueue.ack_many(got)) == len(got)
            with lock:
                counter[queue] += len(got)
        elif done.is_set():
            with lock:
                if counter[queue] >= expected_total:
                    return


@pytest.mark.slow
def test_cluster_and_broadcast_groups_with_replay_from_a_time():
    djqueue.create_topic("orders")
    djqueue.subscribe("orders", "billing", mode="cluster")
    djqueue.subscribe("orders", "audit", mode="cluster")
    djqueue.subscribe("orders", "cache", mode="broadcast")
    broadcast = [djqueue.register_consumer("orders", "cache", f"c{i}").name for i in range(3)]
    assert broadcast == ["orders:cache:c0", "orders:cache:c1", "orders:cache:c2"]
    # 3 cluster consumers per cluster group share its queue; each broadcast consumer its own
    consumers = ["orders:billing"] * 3 + ["orders:audit"] * 3 + broadcast
    seen: list[list[int]] = [[] for _ in consumers]
    published = threading.Event()
    reset_at = {}
    lock = threading.Lock()
    counter: Counter = Counter()
    stop = threading.Event()  # set by in_threads when a thread fails or time is up
    expected = {"orders:billing": TOTAL, "orders:audit": TOTAL, **dict.fromkeys(broadcast, TOTAL)}

    # The cluster group's consumers each take a first batch after the first 1,000 are
    # published and hold it, unacked, until all three hold one: each gets work, and
    # none of it twice, whatever the threads' scheduling.
    first_published = threading.Event()
    holding = {group: threading.Barrier(3) for group in ("orders:billing", "orders:audit")}

    def role(i: int) -> None:
        if i == len(consumers):
            for start in range(0, TOTAL, 1000):
                djqueue.publish_batch("orders", [{"n": n} for n in range(start, start + 1000)])
                first_published.set()
                if start == 5000 - 1000:
                    reset_at["t"] = timezone.now()
            published.set()
            return
        queue = consumers[i]
        if queue in holding:
            assert first_published.wait(60), "the first batch was published"
            first = djqueue.receive(queue, max_messages=100)
            assert first, f"{queue}: a consumer's first receive got work"
            holding[queue].wait(60)
            seen[i].extend(m.payload["n"] for m in first)
            assert len(djqueue.ack_many(first)) == len(first)
            with lock:
                counter[queue] += len(first)
        consume_until(queue, published, seen[i], expected[queue], counter, lock, stop)

    in_threads(role, len(consumers) + 1, timeout=400, stop=stop)
    everything = set(range(TOTAL))
    for group in ("orders:billing", "orders:audit"):
        parts = [s for s, q in zip(seen, consumers, strict=True) if q == group]
        merged = [n for part in parts for n in part]
        assert len(merged) == TOTAL and set(merged) == everything, f"{group}: exactly once"
        assert all(parts), f"{group}: work was shared by its three consumers"
    for i, queue in enumerate(consumers):
        if queue in broadcast:
            assert sorted(seen[i]) == list(range(TOTAL)), f"{queue} saw every message"
    assert Body.objects.count() == TOTAL, "each body stored once"
    assert [lag.pending for lag in djqueue.group_lag("orders", "cache")] == [0, 0, 0]

    # Replay: reset the audit group to the time taken after the 5th batch of 1,000.
    made = djqueue.reset_group("orders", "audit", to=reset_at["t"])
    assert made == 5000
    [lag] = djqueue.group_lag("orders", "audit")
    assert lag.pending == 5000 and lag.oldest_published_at >= reset_at["t"]
    replayed = []
    while got := djqueue.receive("orders:audit", max_messages=500):
        replayed.extend(m.payload["n"] for m in got)
        djqueue.ack_many(got)
    assert sorted(replayed) == list(range(5000, TOTAL))
    assert djqueue.receive("orders:billing") == [], "other groups are not replayed"


def test_batches_published_at_once_return_their_own_bodies():
    """publish_batch's bodies carry the ids of their own rows, with other batches
    stored at the same time, and each delivery references its body. On MySQL, which
    has no RETURNING, the ids are worked out from the first (row_inserts.insert_rows)."""
    from django.db import connections

    djqueue.create_topic("ids")
    djqueue.subscribe("ids", "g")

    def publish(thread: int) -> dict[tuple[int, int, int], int]:
        try:
            return {(thread, batch, n): body.pk for batch in range(10)
                    for n, body in enumerate(djqueue.publish_batch(
                        "ids", [{"t": thread, "b": batch, "n": n} for n in range(30)],
                        headers={"thread": thread}))}
        finally:
            connections.close_all()

    sent = {key: pk for found in in_threads(publish, 4) for key, pk in found.items()}
    assert len(sent) == 4 * 10 * 30 and len(set(sent.values())) == len(sent)
    stored = {pk: (body["t"], body["b"], body["n"]) for pk, body, headers in
              ((pk, json.loads(body), headers) for pk, body, headers in
               Body.objects.values_list("pk", "body", "headers"))
              if headers == {"thread": body["t"]}}
    assert {pk: key for key, pk in sent.items()} == stored
    delivered = Message.objects.filter(queue__name="ids:g")
    assert sorted(delivered.values_list("stored_body_id", flat=True)) == sorted(sent.values())


def test_new_group_starts_now_or_from_the_earliest_retained_message():
    djqueue.create_topic("t")
    djqueue.subscribe("t", "early")
    bodies = djqueue.publish_batch("t", [{"n": n} for n in range(5)])
    djqueue.subscribe("t", "late")
    djqueue.subscribe("t", "replayer", start="earliest")
    [late] = djqueue.group_lag("t", "late")
    [replayer] = djqueue.group_lag("t", "replayer")
    assert (late.pending, replayer.pending) == (0, 5)
    djqueue.publish("t", {"n": 5})
    assert djqueue.group_lag("t", "late")[0].pending == 1
    assert djqueue.reset_group("t", "late", to=bodies[3].pk) == 3  # ids 3, 4 and 5
    got = djqueue.receive("t:late", max_messages=10)
    assert sorted(m.payload["n"] for m in got) == [3, 4, 5]


def test_deliveries_reference_one_body_and_unneeded_bodies_are_collected():
    djqueue.create_topic("gc", retention=0)
    djqueue.subscribe("gc", "a")
    djqueue.subscribe("gc", "b")
    body = djqueue.publish("gc", {"big": "x" * 1000}, headers={"kind": "k"})
    rows = Message.objects.filter(stored_body=body)
    assert rows.count() == 2 and set(rows.values_list("body", flat=True)) == {""}
    [a] = djqueue.receive("gc:a")
    assert a.payload == {"big": "x" * 1000} and a.headers == {"kind": "k"} and a.size > 1000
    a.ack()
    assert collect_bodies() == 0, "group b still needs it"
    [b] = djqueue.receive("gc:b", where="headers.kind = 'k'")
    b.ack()
    assert collect_bodies() == 1 and not Body.objects.exists()


def test_unregistering_a_broadcast_consumer_drops_its_queue():
    djqueue.create_topic("u")
    djqueue.subscribe("u", "g", mode="broadcast")
    djqueue.register_consumer("u", "g", "one")
    djqueue.register_consumer("u", "g", "two")
    djqueue.publish("u", {})
    assert djqueue.unregister_consumer("u", "g", "one") == 1
    assert [q.name for q in djqueue.group_queues("u", "g")] == ["u:g:two"]


@pytest.mark.parametrize(("call", "error"), [
    (lambda: djqueue.subscribe("nope", "g"), QueueNotFound),
    (lambda: djqueue.subscribe("v", "g", mode="fanout"), ConfigurationError),
    (lambda: djqueue.subscribe("v", "g", start="yesterday"), ConfigurationError),
    (lambda: djqueue.subscribe("v", "a:b"), ConfigurationError),
    (lambda: djqueue.subscribe("v", "dup"), ConfigurationError),
    (lambda: djqueue.create_topic("bad name"), ConfigurationError),
    (lambda: djqueue.create_topic("news\n"), ConfigurationError),
    (lambda: djqueue.subscribe("v", "g\n"), ConfigurationError),
    (lambda: djqueue.reset_group("v", "dup", to="now"), InvalidMessage),
    # A group's queue options, refused as it subscribes: a broadcast group's queues are
    # created only as consumers register.
    (lambda: djqueue.subscribe("v", "g", mode="broadcast", colour="red"), ConfigurationError),
    (lambda: djqueue.subscribe("v", "g", mode="broadcast", max_attempts="x"),
     ConfigurationError),
    (lambda: djqueue.subscribe("v", "g", visibility_timeout=-1), ConfigurationError),
])
def test_bad_topic_calls_are_refused(call, error):
    djqueue.create_topic("v")
    djqueue.subscribe("v", "dup")
    with pytest.raises(error):
        call()
    assert [group.name for group in ConsumerGroup.objects.all()] == ["dup"]


def test_broadcast_workers_each_process_every_message(spawn):
    djqueue.create_topic("news")
    djqueue.subscribe("news", "all", mode="broadcast")
    workers = [spawn("djqueue_worker", "--subscribe", "news:all", "--consumer-name", name)
               for name in ("alpha", "beta")]
    wait_until(lambda: len(djqueue.group_queues("news", "all")) == 2, 30, "both registered")
    djqueue.publish_batch("news", [{"n": n} for n in range(200)])
    wait_until(lambda: Effect.objects.count() == 400, 60, "both consumers processed all")
    per_key = Counter(Effect.objects.values_list("key", flat=True))
    assert set(per_key) == set(range(200)) and set(per_key.values()) == {2}
    for worker in workers:
        worker.signal(15)
    assert [w.wait(30) for w in workers] == [0, 0]


def test_a_topic_and_its_groups_whose_creation_times_cannot_be_read_go_on(superuser):
    """A hand edit can leave a time no driver reads back (PostgreSQL's 'infinity', text on
    SQLite that is no date). Every topic operation read its topic's row whole, and the
    group operations their group's and subscriptions' too, so one such creation time
    stopped publishing to the topic; the dashboard and the group-lag alarm read every
    subscription joined to its group and topic, and failed for every queue. No work
    reads those times now (djqueue.storage.unreadable_rows.without_times). A retained
    message's publication time failed every claim, peek and replay of its deliveries:
    a delivery never reads it, and a replay sends such a message now."""
    from django.urls import reverse

    from djqueue.models import AlarmPolicy, ConsumerGroup, Metric, Subscription, Topic
    from djqueue.monitoring import alarms, rollups
    from djqueue.storage import queue_lookup
    from tests.conftest import write_unreadable_time

    djqueue.create_topic("news")
    djqueue.subscribe("news", "all")
    djqueue.subscribe("news", "each", mode="broadcast")
    djqueue.register_consumer("news", "each", "c1")
    for table, model in [("djqueue_topic", Topic), ("djqueue_consumergroup", ConsumerGroup),
                         ("djqueue_subscription", Subscription)]:
        for pk in model.objects.values_list("pk", flat=True):
            write_unreadable_time(table, "created_at", pk)
    for pk in Subscription.objects.values_list("queue_id", flat=True):
        write_unreadable_time("djqueue_queue", "created_at", pk)
    queue_lookup.forget_cached()
    assert djqueue.create_topic("news", exist_ok=True).name == "news"
    first, _ = djqueue.publish_batch("news", [{"n": 1}, {"n": 2}])
    write_unreadable_time("djqueue_body", "published_at", first.pk)  # replayed all the same
    assert [q.name for q in djqueue.group_queues("news", "each")] == ["news:each:c1"]
    peeked = djqueue.peek("news:each:c1")  # a delivery's body is read as a claim reads it
    assert [m.payload["n"] for m in peeked] == [1, 2]
    assert djqueue.get_message(peeked[0].id).payload == {"n": 1}
    assert djqueue.register_consumer("news", "each", "c1").name == "news:each:c1"
    assert djqueue.register_consumer("news", "all", "any").name == "news:all"
    assert djqueue.reset_group("news", "all", to=0) == 2  # replayed: 2 deliveries again
    got = djqueue.receive("news:all", max_messages=5)
    assert sorted(m.payload["n"] for m in got) == [1, 2]
    for message in got:
        message.ack()
    rollups.sample_depth()
    page = superuser.get(reverse("admin:djqueue_dashboard_changelist"))
    assert page.status_code == 200
    assert {g.name for g in page.context["data"].groups} == {"news:all", "news:each:c1"}
    AlarmPolicy.objects.create(name="lag", metric=Metric.GROUP_LAG, threshold=1)
    assert [a.subject for a in alarms.evaluate()] == ["news:each:c1"]
    assert djqueue.unregister_consumer("news", "each", "c1") == 2


def test_a_groups_lag_whose_oldest_send_time_cannot_be_read_is_unknown():
    """group_lag reads each queue's oldest pending delivery as a grouped minimum: when
    that minimum was a time a hand edit left unreadable, the whole call failed (SQLite,
    PostgreSQL, where such a time sorts last: the one pending delivery). It is unknown
    (None) now, as MariaDB's driver reads its zero date, and the count stands."""
    from djqueue.api.consumer_groups import Lag
    from tests.conftest import write_unreadable_time

    djqueue.create_topic("news")
    djqueue.subscribe("news", "all")
    djqueue.subscribe("news", "each", mode="broadcast")
    djqueue.register_consumer("news", "each", "c1")
    djqueue.publish("news", {"n": 1})
    kept = Message.objects.get(queue__name="news:all")
    write_unreadable_time("djqueue_message", "sent_at", kept.pk)
    assert djqueue.group_lag("news", "all") == [Lag("", 1, None)]
    lag = djqueue.group_lag("news", "each")  # its delivery's time is read as sent
    assert [(row.consumer, row.pending) for row in lag] == [("c1", 1)]
    assert lag[0].oldest_published_at is not None
