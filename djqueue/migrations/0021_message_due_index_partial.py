"""The due index holds only scheduled, claimed and dead messages.

``djqueue_msg_due (state, visible_at)`` is read for due scheduled messages, expired
leases and dead letters by age, never for ready messages, which are most rows and
are claimed through ``djqueue_msg_claim``. On PostgreSQL and SQLite it becomes
partial (djqueue.models.message.DUE_INDEX_ROWS): a send of a ready message writes
one index entry fewer, and a claim adds one entry instead of moving one.
MySQL/MariaDB has no partial indexes and keeps it as it is, untouched.

Only the index changes: it is dropped and created again under the same name, on
PostgreSQL and SQLite alone (docs/operations.md, "Upgrading: migrations that change
indexes only").
"""

from django.db import migrations, models

from djqueue.models.indexes import PartialOrPlainIndex, rebuilt_where_partial

NAME = "djqueue_msg_due"
FIELDS = ["state", "visible_at"]
#: DUE_INDEX_ROWS as of this migration (a migration does not follow the model).
PARTIAL = PartialOrPlainIndex(fields=FIELDS, name=NAME, rows=(
    models.Q(state=2) | models.Q(state=3) | models.Q(state=4)))


class Migration(migrations.Migration):

    dependencies = [
        ("djqueue", "0020_message_group_index_partial"),
    ]

    operations = [
        rebuilt_where_partial("message", models.Index(fields=FIELDS, name=NAME), PARTIAL),
    ]
