"""Finding queues by name through the per-process cache (djqueue.storage.queue_lookup)."""

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import djqueue
from djqueue.storage.queue_lookup import forget_cached, get_queues

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_queues_the_cache_does_not_hold_are_read_with_one_statement():
    """The HTTP API server's poll asks for all its long polls' queues at once: a hundred
    idle long polls on a hundred queues cost one read of their rows, not a hundred."""
    names = [f"l.q{n}" for n in range(20)]
    for name in names:
        djqueue.create_queue(name)
    djqueue.pause("l.q3")
    forget_cached()
    with override_settings(DJQUEUE={**settings.DJQUEUE, "QUEUE_CACHE_TTL": 600}):
        with CaptureQueriesContext(connection) as read:
            queues = get_queues(names)
        assert len(read) == 1, [q["sql"] for q in read]
        assert {name: queue.name for name, queue in queues.items()} == {n: n for n in names}
        assert queues["l.q3"].paused and not queues["l.q4"].paused
        with CaptureQueriesContext(connection) as read:
            again = get_queues([*names, "l.nowhere"])  # cached now, but for the last
        assert again.keys() == set(names)  # a name with no queue is left out
        assert [q for q in read if "l.nowhere" not in q["sql"]] == []  # only it was read
        assert len(read) == 1, [q["sql"] for q in read]  # once: not again by get_queue
