"""Handlers of the demo project's queues."""

import logging
import random
import time

from djqueue.models import Message

logger = logging.getLogger("djqueue.demo")


def send_email(message: Message) -> None:
    payload = message.payload
    time.sleep(0.05)  # stands in for an SMTP round trip
    logger.info("Sent email to %s: %s", payload["to"], payload["subject"])


def build_report(message: Message) -> None:
    """Builds in ten parts, reporting its progress (the message's admin page shows it)."""
    rows = int(message.payload.get("rows", 1000))
    total = 0
    for part in range(10):
        total += sum(range(part * rows // 10, (part + 1) * rows // 10))
        message.progress((part + 1) / 10, f"part {part + 1} of 10")
    logger.info("Report %s built (checksum %s)", message.payload.get("name"), total)


def record_events(messages: list[Message]) -> None:
    """A batch handler (settings: ``batch`` 50, ``batch_wait`` 1 s): page views are written
    a list at a time, as one bulk insert into an analytics store would take them."""
    pages: dict[str, int] = {}
    for message in messages:
        page = str(message.payload.get("page", "?"))
        pages[page] = pages.get(page, 0) + 1
    logger.info("Recorded %d page views in one write: %s", len(messages),
                ", ".join(f"{page} x{count}" for page, count in sorted(pages.items())))


def flaky(message: Message) -> None:
    """Fails half the time, to show retries with backoff and the dead-letter queue."""
    if random.random() < 0.5:
        raise RuntimeError(f"flaky handler failed on attempt {message.attempts}")
    logger.info("Flaky message %s succeeded on attempt %s", message.id, message.attempts)
