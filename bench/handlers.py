import time


def noop(message) -> None:
    """The benchmark handler: does nothing, so the queue's own cost is measured."""


def wait_10ms(message) -> None:
    """The I/O row's handler: waits 10 ms, as on a call to another service."""
    time.sleep(0.01)


def noop_batch(messages) -> None:
    """The batch handler row's handler: takes a list of messages and does nothing."""


async def noop_async(message) -> None:
    """The async handler row's handler: a coroutine that does nothing."""


def work_200ms(message) -> None:
    """The concurrency limit's row's handler: 0.2 s of work, long against a hand-over."""
    time.sleep(0.2)
