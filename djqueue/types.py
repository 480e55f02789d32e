"""Types that several layers name, kept below all of them so none imports upward."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: A queue's handler: called with each claimed message.
HandlerFunc = Callable[[Any], Any]

#: Called inside a transaction that acks messages, with (database alias, the messages
#: asked to be acked, those acked): see ``Handler.in_claim_transaction``.
AckHook = Callable[[str, Sequence[Any], Sequence[Any]], None]
