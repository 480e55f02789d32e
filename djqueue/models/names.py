"""The names queues, topics, consumer groups and consumers may have, in one rule that
the models validate with and every lookup by name checks first."""

from __future__ import annotations

import re

#: ``\Z``, not ``$``: ``$`` also matches before a final newline, so "name\n" would pass.
QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}\Z")


def is_valid_name(value: object) -> bool:
    """Whether ``value`` is a name a queue, a topic, a consumer group or a consumer may
    have. A lookup by any other finds nothing, so it is not sent to the database (whose
    driver may refuse it: a lone surrogate, a NUL on PostgreSQL)."""
    return isinstance(value, str) and QUEUE_NAME_RE.match(value) is not None
