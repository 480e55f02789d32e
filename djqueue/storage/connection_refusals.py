"""Whether a connection failed because the server refused it for good: its user, its
password or its database name. A process started before its database waits for a
server that is down, starting up or full, but waiting mends none of these
(djqueue.management.database_ready fails at once on them, saying what to check).
"""

from __future__ import annotations

import re

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
