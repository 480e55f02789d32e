def noop(message) -> None:
    """The benchmark handler: does nothing, so the queue's own cost is measured."""
