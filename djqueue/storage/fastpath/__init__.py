"""Every use of Django's or a driver's private internals, each with its reason.

The hot path (send, claim, ack, the django.tasks worker) skips work the ORM
does per call or per row where a queue pays it per message. Each shortcut here
has a plain path that uses only public APIs and gives the same result; the
equality of the two is checked by tests/storage/test_fastpath.py on every
database. On a Django version the shortcuts were not verified with, djqueue
logs a warning once and takes the plain paths: slower, never wrong.
(What the shortcuts save is measured on the docs site's performance page.)

Owns, by kind:

- ``verified``: the one switch (``verified.enabled``) every shortcut reads when
  called, on for the Django releases the shortcuts were checked against;
- ``instances``: model instances built, made from rows and marked saved without
  ``Model.__init__``; the django.tasks result dataclass without its ``__init__``;
- ``driver_statements``: statements past Django's cursor layers (the single send on
  each driver, the short reads a send repeats, mysqlclient's escaping, MySQL's
  ``BEGIN``, an index hint);
- ``json_values``: the C JSON encoder built once;
- ``callables``: the receivers a signal would reach, a task's function called
  without django.tasks' per-call inspection;
- ``event_loops``: the event loop a worker's handler thread keeps for asgiref's
  ``async_to_sync`` (async handlers and async task functions), read in asgiref.

Callers use the names below (``fastpath.builder``, ...), never the submodules, so a
shortcut can move between them. May import: Django, asgiref, the drivers through
Django's connection, and nothing of djqueue but this package.
"""

from djqueue.storage.fastpath import verified
from djqueue.storage.fastpath.callables import receivers_among, sync_function
from djqueue.storage.fastpath.driver_statements import (
    driver_literal,
    ids_with_index_hint,
    insert_lastrowid,
    insert_returning_id,
    insert_written_out,
    mysql_transaction,
    select_rows,
    with_index_hint,
)
from djqueue.storage.fastpath.event_loops import (
    allow_kept_loop,
    drop_event_loop,
    keep_event_loop,
)
from djqueue.storage.fastpath.instances import (
    builder,
    database_of,
    from_rows,
    frozen_dataclass,
    mark_saved,
    mark_unsaved,
    related_cacher,
)
from djqueue.storage.fastpath.json_values import json_encoder

__all__ = [
    "allow_kept_loop", "builder", "database_of", "driver_literal", "drop_event_loop",
    "from_rows", "frozen_dataclass", "ids_with_index_hint", "insert_lastrowid",
    "insert_returning_id", "insert_written_out", "json_encoder", "keep_event_loop",
    "mark_saved", "mark_unsaved", "mysql_transaction", "receivers_among", "related_cacher",
    "select_rows", "sync_function", "verified", "with_index_hint",
]
