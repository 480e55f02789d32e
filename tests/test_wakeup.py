"""The in-process wake-up: a notify reaches a thread already waiting, and one that comes
before the wait is not lost (notify takes no lock while nobody waits)."""

import threading

from djqueue.wakeup import Wakeup
from tests.conftest import wait_until


def test_a_notify_wakes_a_waiting_thread_at_once():
    wakeup = Wakeup()
    seen = wakeup.generation
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(wakeup.wait(seen, timeout=60)))
    waiter.start()
    wait_until(lambda: wakeup._waiting == 1, timeout=10, what="the waiter to wait")
    wakeup.notify()
    waiter.join(timeout=10)
    assert woken == [True] and not waiter.is_alive()
    assert wakeup._waiting == 0


def test_a_notify_before_the_wait_is_not_lost():
    wakeup = Wakeup()
    seen = wakeup.generation
    wakeup.notify()
    assert wakeup.wait(seen, timeout=60) is True
    assert wakeup.wait(wakeup.generation, timeout=0.01) is False
