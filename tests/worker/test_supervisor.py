"""``djqueue_worker --processes N``: a supervisor process and its real worker children."""

import os
import signal

import pytest

import djqueue
from djqueue.models import History, Message, State, Worker
from djqueue.worker.supervisor import QUICK_FAILURE, Supervisor
from tests.conftest import wait_until
from tests.models import Effect
from tests.worker.test_processes import effects_per_key

pytestmark = pytest.mark.django_db(transaction=True)


def children(count: int, besides: set[int] = frozenset()) -> list[int]:
    """Wait until ``count`` workers other than ``besides`` are registered; their pids."""
    return wait_until(lambda: len(pids := set(Worker.objects.values_list("pid", flat=True))
                                  - besides) == count and sorted(pids),
                      60, f"{count} worker processes")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_children_share_the_queue_and_stop_with_one_sigterm(spawn):
    djqueue.create_queue("t.slow", visibility_timeout=300)
    supervisor = spawn("djqueue_worker", "t.slow", "--processes", "2", "-b", "1")
    pids = children(2)
    assert supervisor.pid not in pids
    djqueue.send_batch("t.slow", [{"n": i} for i in range(1, 1001)])
    wait_until(lambda: History.objects.count() == 1000, 120, "all messages processed")
    counts = effects_per_key()
    assert set(counts) == set(range(1, 1001)) and set(counts.values()) == {1}
    assert set(Effect.objects.values_list("pid", flat=True)) == set(pids)

    # One SIGTERM reaches each child once: a running handler is let finish.
    djqueue.send_batch("t.slow", [{"n": 1001, "sleep": 2}, {"n": 1002, "sleep": 2}])
    wait_until(lambda: Effect.objects.filter(key__in=[-1001, -1002]).count() == 2, 30,
               "both slow handlers running")
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, supervisor.output()
    assert Effect.objects.filter(key__in=[1001, 1002]).count() == 2, "handlers cut short"
    assert not Worker.objects.exists() and not Message.objects.exists()
    assert not any(alive(pid) for pid in pids)


def test_a_second_signal_stops_the_children_at_once(spawn):
    djqueue.create_queue("t.slow", visibility_timeout=300)
    # --max-messages 1: neither child prefetches the other's message.
    supervisor = spawn("djqueue_worker", "t.slow", "--processes", "2", "--max-messages", "1",
                       "--shutdown-grace", "120")
    children(2)
    djqueue.send_batch("t.slow", [{"n": 1, "sleep": 600}, {"n": 2, "sleep": 600}])
    wait_until(lambda: Effect.objects.filter(key__in=[-1, -2]).count() == 2, 30,
               "both slow handlers running")
    supervisor.signal(signal.SIGTERM)
    supervisor.signal(signal.SIGINT)  # a second SIGTERM this soon could merge with the first
    assert supervisor.wait(60) == 0, supervisor.output()
    assert not Worker.objects.exists()
    assert Message.objects.filter(state=State.READY).count() == 2, "released"


def test_a_killed_child_is_replaced(spawn):
    djqueue.create_queue("t.record")
    supervisor = spawn("djqueue_worker", "t.record", "--processes", "2")
    first, second = children(2)
    os.kill(first, signal.SIGKILL)
    replacement = children(2, besides={first})
    assert second in replacement and first not in replacement
    djqueue.send_batch("t.record", [{"n": i} for i in range(200)])
    wait_until(lambda: History.objects.count() == 200, 60, "all messages processed")
    assert "exited with signal SIGKILL; starting another" in supervisor.output()
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, supervisor.output()


def test_children_that_reach_max_messages_are_replaced(spawn):
    djqueue.create_queue("t.record")
    djqueue.send_batch("t.record", [{"n": i} for i in range(300)])
    supervisor = spawn("djqueue_worker", "t.record", "--processes", "2", "-b", "10",
                       "--max-messages", "50")
    wait_until(lambda: History.objects.count() == 300, 120, "all messages processed")
    assert len(set(Effect.objects.values_list("pid", flat=True))) >= 6
    assert set(effects_per_key().values()) == {1}
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, supervisor.output()


def test_burst_children_drain_and_are_not_replaced(spawn):
    djqueue.create_queue("t.record")
    djqueue.send_batch("t.record", [{"n": i} for i in range(500)])
    supervisor = spawn("djqueue_worker", "t.record", "--processes", "3", "-b", "10", "--burst")
    assert supervisor.wait(120) == 0, supervisor.output()
    # It ended: a replaced child would have found nothing, ended, been replaced...
    assert History.objects.count() == 500 and not Worker.objects.exists()


def test_children_stop_when_the_supervisor_is_killed(spawn):
    djqueue.create_queue("t.record")
    supervisor = spawn("djqueue_worker", "t.record", "--processes", "2")
    pids = children(2)
    supervisor.signal(signal.SIGKILL)
    supervisor.wait(10)
    # Each child got SIGTERM from the kernel (PR_SET_PDEATHSIG) and stopped gracefully.
    wait_until(lambda: not Worker.objects.exists(), 60, "the children to deregister")
    wait_until(lambda: not any(alive(pid) for pid in pids), 30, "the children to exit")


def test_nothing_starts_for_a_queue_no_worker_could_work(spawn):
    supervisor = spawn("djqueue_worker", "t.nope", "--processes", "2")
    assert supervisor.wait(60) == 1
    # Said once, by the supervisor: a child would have said it too, and been replaced.
    assert supervisor.output().count("No handler for queue 't.nope'") == 1
    bad = spawn("djqueue_worker", "t.record", "--processes", "0")
    assert bad.wait(60) == 2
    assert "--processes" in bad.output()


def test_the_pause_before_a_replacement_grows_while_children_fail_at_start():
    supervisor = Supervisor(["true"], 1)
    pauses = [supervisor._pause_after(1, lived=0.5) for _ in range(8)]
    assert pauses == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert supervisor._pause_after(1, lived=QUICK_FAILURE) == 0  # it ran a while: at once
    assert supervisor._pause_after(1, lived=0.5) == 0.5  # and the count started again
    assert supervisor._pause_after(0, lived=0.5) == 0  # recycled, not failed
    assert supervisor._pause_after(-signal.SIGKILL, lived=0.5) == 0.5
