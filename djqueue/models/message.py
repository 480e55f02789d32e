"""The hot table that workers poll.

Only pending messages live here (ready, scheduled, claimed, dead); finished ones
move to :class:`~djqueue.models.History`, so the claim query scans few rows.
Two indexes serve every hot query:

* ``djqueue_msg_claim (queue_id, state, priority DESC, id)``: the claim,
  ``WHERE queue_id = ? AND state = READY ORDER BY priority DESC, id LIMIT n``.
* ``djqueue_msg_due (state, visible_at)``: promotion of due scheduled messages
  and the reaper's scan for expired leases (a claimed message's ``visible_at``
  is its lease expiry). On PostgreSQL and SQLite it holds only scheduled,
  claimed and dead messages (``DUE_INDEX_ROWS``).

A third, ``djqueue_msg_group (queue_id, group_key, state, id)``, serves ordered
groups and per-key limits: is a group busy, and which message of it is next. On
PostgreSQL and SQLite it holds only messages that have a group key.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, ClassVar, Protocol

from asgiref.sync import sync_to_async
from django.db import models
from django.utils import timezone

from djqueue.models.indexes import NonNullIndex, PartialOrPlainIndex


class State(models.IntegerChoices):
    READY = 1, "ready"
    SCHEDULED = 2, "scheduled"
    CLAIMED = 3, "claimed"
    DEAD = 4, "dead"
    #: Ordered queues: queued behind an earlier message of its group.
    WAITING = 5, "waiting"


PENDING_STATES = (State.READY, State.SCHEDULED, State.CLAIMED, State.WAITING)
#: The states in which a message holds its ordered group.
GROUP_HOLDING_STATES = (State.READY, State.SCHEDULED, State.CLAIMED)
#: A message's payload not decoded yet (see Message.payload).
_UNREAD = object()
_decoder = json.JSONDecoder()


def decode_payload(text: str | bytes) -> Any:
    """``json.loads(text)``, by the decoder's ``raw_decode`` where that reads the whole text.

    Why: a large share of what ``json.loads`` takes on a task's payload is its own
    Python around the C scanner (type checks, two whitespace matches; docs/performance.md
    gives the figures per Python version), and a django.tasks
    worker decodes every payload it runs. Anything ``raw_decode`` does not read to
    its end (leading or trailing whitespace, a byte string, bad JSON) goes to
    ``json.loads``, for its result or its error."""
    if type(text) is str:
        try:
            value, end = _decoder.raw_decode(text)
        except json.JSONDecodeError:
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)


#: The messages djqueue_msg_due holds on PostgreSQL and SQLite: those read by state and
#: time (due scheduled messages, expired leases, dead letters by age), not the ready
#: ones that are most rows and are claimed by djqueue_msg_claim, nor the waiting ones,
#: read by queue and group. Written as OR-ed equalities, the form SQLite proves a
#: query's ``state = …`` implies.
DUE_INDEX_ROWS = (models.Q(state=State.SCHEDULED) | models.Q(state=State.CLAIMED)
                  | models.Q(state=State.DEAD))


class MessageQuerySet(models.QuerySet["Message"]):
    def ready(self) -> MessageQuerySet:
        return self.filter(state=State.READY)

    def scheduled(self) -> MessageQuerySet:
        return self.filter(state=State.SCHEDULED)

    def claimed(self) -> MessageQuerySet:
        return self.filter(state=State.CLAIMED)

    def dead(self) -> MessageQuerySet:
        return self.filter(state=State.DEAD)

    def pending(self) -> MessageQuerySet:
        return self.filter(state__in=PENDING_STATES)

    def due(self, now: datetime) -> MessageQuerySet:
        """Scheduled messages whose delay has passed."""
        return self.filter(state=State.SCHEDULED, visible_at__lte=now)

    def expired(self, now: datetime) -> MessageQuerySet:
        """Claimed messages whose lease has run out."""
        return self.filter(state=State.CLAIMED, visible_at__lte=now)

    def claim_order(self) -> MessageQuerySet:
        return self.order_by("-priority", "id")


def exception_line(error: str) -> str:
    """The last non-blank line of a recorded failure: of a handler's traceback, its
    exception ("ValueError: boom"), what a list, a table or a log line has room for (the
    whole text stays in the message's errors)."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    return lines[-1] if lines else "(no error text)"


class Message(models.Model):
    id = models.BigAutoField(primary_key=True)
    # No index of its own: djqueue_msg_claim and djqueue_msg_group both begin with it.
    queue = models.ForeignKey("djqueue.Queue", on_delete=models.PROTECT, related_name="messages",
                              db_index=False)
    state = models.PositiveSmallIntegerField(choices=State.choices, default=State.READY)
    priority = models.SmallIntegerField(default=0)
    visible_at = models.DateTimeField(
        default=timezone.now,
        help_text="Scheduled: when it becomes ready. Claimed: when its lease expires.")
    body = models.TextField(help_text="The payload, JSON-encoded (empty for a topic delivery).")
    stored_body = models.ForeignKey(
        "djqueue.Body", null=True, blank=True, on_delete=models.DO_NOTHING, related_name="+",
        db_index=False,  # djqueue_msg_body, of the rows that have one
        help_text="A topic delivery's body, stored once for all its deliveries.")
    # NULL, not "": "no group" must never match a group key, in SQL or in Python.
    group_key = models.CharField(  # noqa: DJ001
        max_length=200, null=True, blank=True,
        help_text="Ordered queues deliver the messages of one key strictly in send order.")
    headers = models.JSONField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0, help_text="Deliveries so far.")
    owner = models.CharField(max_length=100, blank=True, default="",
                             help_text="Receiver holding the current lease.")
    lease_token = models.CharField(max_length=32, blank=True, default="",
                                   help_text="Identifies the current delivery (a receipt handle).")
    sent_at = models.DateTimeField(default=timezone.now)
    claimed_at = models.DateTimeField(null=True, blank=True)
    errors = models.JSONField(null=True, blank=True,
                              help_text="One entry per failed delivery.")
    origin_queue = models.ForeignKey(
        "djqueue.Queue", null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        db_index=False,  # djqueue_msg_origin, of the rows that have one
        help_text="For a dead-lettered message: the queue it failed in.")

    objects = MessageQuerySet.as_manager()

    #: True on the message a send returned instead of a new one, its dedup key being
    #: taken (djqueue.api.sending.send); not stored.
    duplicate = False

    class Meta:
        permissions = [
            ("retry_message", "Can retry scheduled messages now"),
            ("change_visibility", "Can change when a message becomes visible"),
        ]
        indexes = [
            models.Index(fields=["queue", "state", "-priority", "id"], name="djqueue_msg_claim"),
            PartialOrPlainIndex(fields=["state", "visible_at"], name="djqueue_msg_due",
                                rows=DUE_INDEX_ROWS),
            NonNullIndex(fields=["queue", "group_key", "state", "id"], name="djqueue_msg_group",
                         non_null="group_key"),
            NonNullIndex(fields=["stored_body"], name="djqueue_msg_body"),
            NonNullIndex(fields=["origin_queue"], name="djqueue_msg_origin"),
        ]

    def __str__(self) -> str:
        return f"#{self.id} ({self.get_state_display()})"

    #: The decoded payload, once :attr:`payload` has read it.
    _payload: Any

    @property
    def payload(self) -> Any:
        # Read from __dict__: a miss there costs no AttributeError, which a first read
        # of each claimed message would raise and catch.
        decoded = self.__dict__.get("_payload", _UNREAD)
        if decoded is _UNREAD:
            decoded = self._payload = decode_payload(self.encoded_body)
        return decoded

    @property
    def encoded_body(self) -> str:
        """The JSON text of the payload, wherever it is stored."""
        stored = self.stored_body if self.stored_body_id is not None else None
        return self.body if stored is None else stored.body

    @property
    def size(self) -> int:
        return len(self.encoded_body.encode())

    @property
    def queue_name(self) -> str:
        return self.queue.name

    @property
    def last_error(self) -> str | None:
        """The last recorded failure's text; None if there is none (or ``errors`` is not
        djqueue's list of records: a row written by hand may hold anything there)."""
        errors = self.errors
        if isinstance(errors, list) and errors and isinstance(errors[-1], dict):
            error = errors[-1].get("error")
            return None if error is None else str(error)
        return None

    @property
    def last_exception(self) -> str | None:
        """:attr:`last_error`'s exception line (see :func:`exception_line`)."""
        error = self.last_error
        return None if error is None else exception_line(error)

    # State changes, each one short transaction. Models sit below the storage layer and
    # cannot import it: djqueue.storage.transitions sets ``transitions`` as it loads
    # (djqueue's AppConfig.ready imports it), and these methods call it.

    transitions: ClassVar[MessageTransitions]

    def ack(self) -> None:
        """Finish the message (Q4M ``queue_end``). Raises NotOwner if the lease was lost."""
        self.transitions.ack(self)

    def nack(self, delay: float | None = None, error: str | None = None) -> None:
        """Give the message back (Q4M ``queue_abort``), or retry it later with an error.

        With ``error`` the failure is recorded and, once ``max_attempts`` is
        reached, the message is dead-lettered; ``delay=None`` then follows the
        queue's backoff schedule. Without ``error`` it is released at once (or
        after ``delay``) and the delivery does not count as an attempt.
        """
        self.transitions.nack(self, delay, error)

    def extend(self, seconds: float) -> None:
        """Keep the lease for ``seconds`` more from now (SQS ChangeMessageVisibility)."""
        self.transitions.extend(self, seconds)

    def progress(self, fraction: float, note: str = "") -> None:
        """Report how far the handler has come (0 to 1, with a short note), for the
        admin and ``djqueue.get_progress()`` to show while it runs. Raises NotOwner if
        the lease was lost, InvalidProgress for anything but a fraction and a text."""
        self.transitions.progress(self, fraction, note)

    # The same for async code: each runs in Django's sync thread, as the ORM's own
    # a-methods do (a blocking query on the event loop raises SynchronousOnlyOperation).

    async def aack(self) -> None:
        """:meth:`ack` for async code."""
        await sync_to_async(self.ack, thread_sensitive=True)()

    async def anack(self, delay: float | None = None, error: str | None = None) -> None:
        """:meth:`nack` for async code."""
        await sync_to_async(self.nack, thread_sensitive=True)(delay, error)

    async def aextend(self, seconds: float) -> None:
        """:meth:`extend` for async code."""
        await sync_to_async(self.extend, thread_sensitive=True)(seconds)

    async def aprogress(self, fraction: float, note: str = "") -> None:
        """:meth:`progress` for async code."""
        await sync_to_async(self.progress, thread_sensitive=True)(fraction, note)


class MessageTransitions(Protocol):
    """The state changes a received message offers (see djqueue.storage.transitions)."""

    def ack(self, message: Message) -> None: ...

    def nack(self, message: Message, delay: float | None, error: str | None) -> None: ...

    def extend(self, message: Message, seconds: float) -> None: ...

    def progress(self, message: Message, fraction: float, note: str) -> None: ...
