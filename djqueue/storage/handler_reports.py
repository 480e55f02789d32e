"""What a handler reports while it runs: progress, and the log records it emits.

Progress (``message.progress(0.4, "resized 40 of 100")``) is written at once, in
its own short transaction that locks the message's row for a moment to check
that this receiver still holds its lease: a report from a delivery whose lease
was lost raises NotOwner, like an ack would, and never overwrites the report of
the delivery that took over. Inside a worker, one handler run writes at most
one report per ``PROGRESS_INTERVAL``; a report made sooner waits for the next
write, or for the handler's return, so a tight loop of reports costs the
database a few statements a second, not one a call.

Log records are collected in memory while the handler runs (the worker's
capture, djqueue.worker.handler_logs, calls :meth:`DeliveryReport.add`) and
written in one INSERT when it returns, before the message is acked or failed,
so they are there by the time anyone sees the message finished. The delivery
being run is a context variable: it follows the handler into ``async_to_sync``
but not into threads the handler starts itself.

An exactly-once handler runs inside its ack's transaction; its progress
commits with it, so nobody sees it before the handler has returned.
"""

from __future__ import annotations

import logging
import math
import time
from contextvars import ContextVar
from datetime import UTC, datetime

from django.db import DatabaseError, transaction

from djqueue.conf import get_settings
from djqueue.exceptions import InvalidProgress, NotOwner, shown_value
from djqueue.models import Message, MessageLog, MessageProgress, State
from djqueue.storage import dialects, host_clock
from djqueue.storage.payloads import storable, unstorable
from djqueue.storage.unreadable_rows import first_row, read_rows

logger = logging.getLogger("djqueue.worker")
MAX_NOTE_CHARS = 200
MAX_LOGGER_CHARS = 100
#: A batch run whose records times messages pass this keeps its records once, with its
#: first message, and one record on each other message pointing there.
BATCH_LOG_ROWS = 1_000
#: Rows a log INSERT carries at most: a statement stays far below MySQL's packet limit.
LOG_ROWS_A_STATEMENT = 500


class DeliveryReport:
    """One handler run's reports, kept until :func:`reporting` writes them.

    A batch handler's run is one report for all its messages: each of them keeps every
    record of the run (the run is one call, so a record cannot be told apart by
    message), and ``message`` is None, as progress is a message's own. A large run
    (records times messages past BATCH_LOG_ROWS) would write that product: its records are
    kept once, with its first message, and each other message keeps one record, at the
    run's highest level, saying where they are.
    """

    def __init__(self, messages: list[Message], max_records: int, max_chars: int) -> None:
        self.messages = messages
        self.message = messages[0] if len(messages) == 1 else None
        #: (level, logger name, text, created) of the records kept, in order.
        self.records: list[tuple[int, str, str, float]] = []
        self.dropped = 0
        self.max_records = max_records
        self.max_chars = max_chars
        #: The newest progress not yet written, and when the last write was (monotonic).
        self.pending: tuple[float, str] | None = None
        self.written_at = -math.inf

    def add(self, level: int, logger_name: str, text: str, created: float) -> None:
        """Keep a log record (the first ``max_records - 1``, then a count of the rest)."""
        if len(self.records) >= self.max_records - 1:
            self.dropped += 1
            return
        if len(text) > self.max_chars:
            text = f"{text[:self.max_chars]}… ({len(text) - self.max_chars} more characters cut)"
        self.records.append((level, logger_name, text, created))

    def save(self) -> None:
        """Write the records kept, for each message of the run, and the last progress
        not yet written."""
        if self.dropped:
            self.records.append((
                logging.WARNING, "djqueue.worker", f"{self.dropped} more log record(s) dropped: "
                f"a delivery keeps at most {self.max_records} (DJQUEUE['HANDLER_LOG_RECORDS'])",
                time.time()))
        try:
            if self.records:
                MessageLog.objects.using(dialects.alias()).bulk_create(
                    self._log_rows(), batch_size=LOG_ROWS_A_STATEMENT)
            if self.pending is not None and self.message is not None:
                _write_progress(self.message, *self.pending)
        except NotOwner:
            pass  # the lease was lost: the delivery that took over reports its own
        except DatabaseError:  # the handler's outcome still counts; only its reports are lost
            ids = [m.pk for m in self.messages]
            logger.exception("Could not keep the log records or progress of message(s) %s",
                             ", ".join(map(str, ids)), extra={"message_id": ids[0]})


    def _log_rows(self) -> list[MessageLog]:
        first, *others = self.messages
        if len(self.messages) * len(self.records) <= BATCH_LOG_ROWS:
            return [_log_row(message, *record)
                    for message in self.messages for record in self.records]
        pointer = (max(level for level, *_ in self.records), "djqueue.worker",
                   f"this message was one of {len(self.messages)} in a batch handler's run, "
                   f"which logged {len(self.records)} record(s): they are kept with message "
                   f"{first.pk}", self.records[-1][3])
        return ([_log_row(first, *record) for record in self.records]
                + [_log_row(message, *pointer) for message in others])


def _log_row(message: Message, level: int, logger_name: str, text: str,
             created: float) -> MessageLog:
    # One character no database stores (a NUL, a lone surrogate) must not lose the record.
    text, logger_name = storable(text), storable(logger_name)
    return MessageLog(
        message_id=message.pk, queue_id=message.queue_id, attempt=message.attempts,
        level=level, logger=logger_name[:MAX_LOGGER_CHARS], text=text,
        logged_at=datetime.fromtimestamp(created, tz=UTC))


_current: ContextVar[DeliveryReport | None] = ContextVar("djqueue_delivery", default=None)


class reporting:  # used like a function: ``with reporting(message):``
    """Collect the reports of one handler run of ``message`` (a batch handler's: of the
    list of its messages); write them when it ends.

    A class rather than a generator context manager: it is entered once a message on
    the worker's hot path, where the generator's machinery costs more than the rest.
    """

    __slots__ = ("report", "token")

    def __init__(self, message: Message | list[Message]) -> None:
        settings = get_settings()
        self.report = DeliveryReport(message if isinstance(message, list) else [message],
                                     settings.HANDLER_LOG_RECORDS, settings.HANDLER_LOG_CHARS)

    def __enter__(self) -> DeliveryReport:
        self.token = _current.set(self.report)
        return self.report

    def __exit__(self, *exc_info: object) -> None:
        _current.reset(self.token)  # first: what saving logs is not the handler's
        self.report.save()


def current() -> DeliveryReport | None:
    """The handler run this thread (or task) is in, if any."""
    return _current.get()


def report_progress(fraction: float, note: str = "") -> None:
    """Report the progress of the message whose handler (or task) is running here."""
    report = _current.get()
    if report is None or report.message is None:
        raise InvalidProgress("report_progress() reports for the one message whose handler "
                              "a worker is running; in a batch handler's run, or outside a "
                              "handler, call progress() on a received message")
    progress(report.message, fraction, note)


def progress(message: Message, fraction: float, note: str = "") -> None:
    """``message.progress()``: write it now, or with the next write inside a worker."""
    fraction, note = checked(fraction, note)
    report = _current.get()
    if report is not None and report.message is not None and report.message.pk == message.pk:
        now = time.monotonic()
        if now - report.written_at < get_settings().PROGRESS_INTERVAL and fraction < 1:
            report.pending = (fraction, note)
            return
        report.written_at, report.pending = now, None
    _write_progress(message, fraction, note)


def checked(fraction: object, note: object) -> tuple[float, str]:
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not (
            0 <= fraction <= 1):
        raise InvalidProgress(f"progress must be a number from 0 to 1, got {shown_value(fraction)}")
    if not isinstance(note, str) or unstorable(note) is not None:
        raise InvalidProgress("a progress note must be text without NUL characters or lone "
                              f"surrogates, got {shown_value(note, 60)}")
    if len(note) > MAX_NOTE_CHARS:
        raise InvalidProgress(f"a progress note is at most {MAX_NOTE_CHARS} characters, "
                              f"got {len(note)}")
    return float(fraction), note


def _write_progress(message: Message, fraction: float, note: str) -> None:
    db = dialects.alias()
    with transaction.atomic(using=db):
        held = (Message.objects.using(db).select_for_update()
                .filter(pk=message.pk, state=State.CLAIMED, lease_token=message.lease_token)
                .values_list("attempts", flat=True).first())
        if held is None:
            raise NotOwner(f"Message {message.pk} is no longer leased to this receiver.")
        values = {"queue_id": message.queue_id, "attempt": held, "fraction": fraction,
                  "note": note, "updated_at": host_clock.database_now(db)}
        if not MessageProgress.objects.using(db).filter(message_id=message.pk).update(**values):
            MessageProgress.objects.using(db).create(message_id=message.pk, **values)


def progress_of(message_id: int) -> MessageProgress | None:
    """A message's last progress; its time None if a hand edit left it unreadable
    (djqueue.storage.unreadable_rows), as for the log records and the trace."""
    return first_row(MessageProgress.objects.using(dialects.alias()).filter(
        message_id=message_id))


def logs_of(message_id: int) -> list[MessageLog]:
    """A message's kept log records, oldest first (every delivery's)."""
    return read_rows(MessageLog.objects.using(dialects.alias()).filter(message_id=message_id)
                     .order_by("id"))
