"""A stop or reload signal taken by a thread other than the main one still stops the
process (djqueue.processes.stop_signals).

The kernel gives a signal sent to a process to any thread that does not block it.
These tests block it in the main thread, so another thread must take it, while the
main thread waits as ``djqueue_metrics``'s does: a Python handler would run only once
that wait ended."""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from djqueue.processes.stop_signals import StopSignals


@contextmanager
def taken_by_another_thread(signum: int) -> Iterator[None]:
    """The main thread blocks ``signum`` until the block ends."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signum})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})


def sent_from_a_thread(signum: int) -> threading.Thread:
    """Sends ``signum`` to this process once the main thread is likely waiting. The
    tests' outcome does not depend on that moment: only whether the old code failed
    them does (it failed when the main thread was already waiting)."""
    def send() -> None:
        time.sleep(0.2)
        os.kill(os.getpid(), signum)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    return sender


@pytest.mark.parametrize("signum, runs_anew", [(signal.SIGHUP, True),
                                               (signal.SIGTERM, False)])
def test_a_signal_another_thread_takes_wakes_the_main_threads_wait_for_the_stop(
        signum, runs_anew):
    signals = StopSignals()
    with signals.installed(), taken_by_another_thread(signum):
        sender = sent_from_a_thread(signum)
        # Thirty seconds is only the bound of a failure: the stop comes within
        # milliseconds, or, as before, not until this wait has ended.
        assert signals.stop.wait(30)
        sender.join()
    assert signals.runs_anew is runs_anew
    assert (signals.reloads, signals.received) == (
        (1, []) if runs_anew else (0, [signal.SIGTERM]))


def test_a_select_loop_wakes_for_a_signal_another_thread_takes_and_sees_it_counted():
    """As the supervisor's loop: it looks at the counts after its ``select``."""
    signals = StopSignals(stop_on_reload=False)
    with signals.installed(wakeup_fd=True), taken_by_another_thread(signal.SIGHUP):
        assert signals.wakeup_fd is not None
        sender = sent_from_a_thread(signal.SIGHUP)
        readable, _, _ = select.select([signals.wakeup_fd], [], [], 30)
        sender.join()
        assert readable == [signals.wakeup_fd]
        signals.drain_wakeup_fd()
        assert signals.reloads == 1
        assert not signals.stop.is_set()  # a supervisor only counts a reload
    assert signals.wakeup_fd is None
    assert signal.set_wakeup_fd(-1) == -1  # the process's wake-up descriptor restored
