"""An error a maintenance pass met serving one queue alone (an absurd value in its row,
say), counted on that queue's row: the pass goes on with the other queues, and the
dashboard shows the count and the last text."""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.db.models import F

from djqueue.models import Queue
from djqueue.storage import dialects
from djqueue.storage.payloads import storable

logger = logging.getLogger("djqueue")
#: The longest error text a queue row keeps.
LAST_ERROR_CHARS = 2000


def note_error(queue_id: int, error: str) -> None:
    """Count an error a pass met serving this queue alone, and keep its text (the
    dashboard shows both). Best effort: a database error is logged."""
    try:
        Queue.objects.using(dialects.alias()).filter(pk=queue_id).update(
            errors_seen=F("errors_seen") + 1, last_error=storable(error[:LAST_ERROR_CHARS]))
    except DatabaseError:
        logger.exception("Could not count an error of queue %s", queue_id)
