"""Message ids a caller names (redrive, retry_now, change_visibility, delete_batch):
checked, and cut into chunks that one statement and one short transaction each take."""

from __future__ import annotations

from djqueue.conf import get_settings
from djqueue.exceptions import InvalidMessage, given_id

#: The largest message id (a signed 64-bit key on every database).
MAX_ID = 2**63 - 1


def one_id(message_id: object, caller: str) -> int:
    """``message_id`` if it is an int (not a bool); InvalidMessage names what it is
    otherwise. An int past 64 bits is returned: it finds no row (Django compares it so)."""
    return given_id(message_id, InvalidMessage, f"{caller}() takes a message id")


def id_chunks(ids: object) -> list[list[int]]:
    """``ids`` in increasing order without repeats, in chunks of ``PRUNE_BATCH`` (which
    djqueue.conf bounds for one statement's parameters). Increasing, so that two calls
    over the same rows lock them in one order and cannot deadlock. InvalidMessage names
    what is not a message id.

    Why chunks: over 65,535 ids was a driver error on PostgreSQL with server-side
    binding, and one transaction over them all held every row's lock to its end."""
    if not isinstance(ids, list | tuple):
        raise InvalidMessage(f"Message ids must be a list of integers, got a "
                             f"{type(ids).__name__}.")
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int):
            raise InvalidMessage(f"Message ids must be a list of integers; it holds a "
                                 f"{type(i).__name__}.")
        if not 1 <= i <= MAX_ID:
            shown = str(i) if abs(i) <= MAX_ID * 2 else f"an integer of {i.bit_length()} bits"
            raise InvalidMessage(f"A message id is a whole number from 1 to 2**63-1, got "
                                 f"{shown}.")
    ordered = sorted(set(ids))
    size = get_settings().PRUNE_BATCH
    return [ordered[start:start + size] for start in range(0, len(ordered), size)]
