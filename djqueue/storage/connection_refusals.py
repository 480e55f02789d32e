"""Whether a connection failed because the server refused it for good: its user, its
password or its database name. A process started before its database waits for a
server that is down, starting up or full, but waiting mends none of these
(djqueue.management.database_ready fails at once on them, saying what to check).
"""

from __future__ import annotations

import re

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

#: MySQL/MariaDB errors of a connection the server answered and refused for its user,
#: password or database: ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR,
#: ER_BAD_DB_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR.
MYSQL_REFUSED = frozenset({1044, 1045, 1049, 1698})
#: PostgreSQL's: libpq gives a connection's failure no SQLSTATE, only the server's
#: message, in its lc_messages language; these are its English ones. A refusal in
#: another language reads as a server that does not answer yet.
POSTGRESQL_REFUSED = re.compile(r'FATAL:\s+(database "[^"]*" does not exist|role "[^"]*" does '
                                r"not exist|password authentication failed|no pg_hba\.conf entry"
                                r"|no such database: )")  # the last: PgBouncer's


def is_refused(exc: BaseException) -> bool:
    """Whether a connection failed because the server refused its user, password or
    database: trying again later mends nothing, unlike a server that is down, starting
    up or full (which answer with other errors)."""
    if getattr(exc, "args", None) and exc.args[0] in MYSQL_REFUSED:
        return True
    return POSTGRESQL_REFUSED.search(str(exc)) is not None


def probe_connection(db: str) -> BaseDatabaseWrapper:
    """The connection to try database ``db`` with first: its own, or, where Django's pool
    (``OPTIONS["pool"]``) serves it, a connection of the same settings without the pool,
    which the caller closes. Why: the pool answers a refusal only with its timeout (30 s
    by default) and no cause, which reads as a server not answering yet, waited for
    without end. A wrapper of the same class and settings is what Django makes for an
    alias (ConnectionHandler.create_connection), the pool's options left out."""
    connection = connections[db]
    options = connection.settings_dict.get("OPTIONS") or {}
    if not options.get("pool"):
        return connection
    unpooled = {**connection.settings_dict,
                "OPTIONS": {k: v for k, v in options.items() if k != "pool"}}
    return type(connection)(unpooled, db)
