"""The in-process wake-up: a notify reaches a thread (or a coroutine) already waiting, and one that comes
before the wait is not lost (notify takes no lock while nobody waits)."""

import asyncio
import threading

from djqueue.polling import LocalWakeup
from tests.conftest import wait_until


def test_a_notify_wakes_a_waiting_thread_at_once():
    local_wakeup = LocalWakeup()
    seen = local_wakeup.generation
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(local_wakeup.wait(seen, timeout=60)))
    waiter.start()
    wait_until(lambda: local_wakeup._waiting == 1, timeout=10, what="the waiter to wait")
    local_wakeup.notify()
    waiter.join(timeout=10)
    assert woken == [True] and not waiter.is_alive()
    assert local_wakeup._waiting == 0


def test_a_notify_before_the_wait_is_not_lost():
    local_wakeup = LocalWakeup()
    seen = local_wakeup.generation
    local_wakeup.notify()
    assert local_wakeup.wait(seen, timeout=60) is True
    assert local_wakeup.wait(local_wakeup.generation, timeout=0.01) is False


def test_a_notify_from_another_thread_wakes_a_waiting_coroutine_on_its_loop():
    local_wakeup = LocalWakeup()

    async def waits() -> tuple[bool, bool]:
        seen = local_wakeup.generation
        notifier = threading.Thread(target=lambda: (
            wait_until(lambda: local_wakeup._awaiting, timeout=10, what="the coroutine"),
            local_wakeup.notify()))
        notifier.start()
        woken = await asyncio.wait_for(local_wakeup.await_change(seen, timeout=60), 10)
        notifier.join(10)
        early = await local_wakeup.await_change(seen, timeout=60)  # bumped already
        return woken, early

    assert asyncio.run(waits()) == (True, True)
    assert not local_wakeup._awaiting
    assert asyncio.run(local_wakeup.await_change(local_wakeup.generation, 0.01)) is False
