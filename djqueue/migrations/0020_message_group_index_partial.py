"""The ordered-group index holds only messages that have a group key.

``djqueue_msg_group (queue_id, group_key, state, id)`` is read only for given keys
(``group_key = …`` or ``IN (…)``: a group's holders and head, a per-key rate's
groups), yet every message sent got an entry and every ack removed one, although
outside ordered queues and per-key limits the key is NULL. On PostgreSQL and SQLite
it becomes partial (``WHERE group_key IS NOT NULL``,
djqueue.models.indexes.NonNullIndex); MySQL/MariaDB has no partial indexes and
keeps it as it is, untouched by this migration.

Only the index changes: it is dropped and created again under the same name, on
PostgreSQL and SQLite alone (docs/operations.md, "Upgrading: migrations that change
indexes only").
"""

from django.db import migrations, models

from djqueue.models.indexes import NonNullIndex, rebuilt_where_partial

NAME = "djqueue_msg_group"
FIELDS = ["queue", "group_key", "state", "id"]
PARTIAL = NonNullIndex(fields=FIELDS, name=NAME, non_null="group_key")


class Migration(migrations.Migration):

    dependencies = [
        ("djqueue", "0019_task_record_pattern_indexes"),
    ]

    operations = [
        rebuilt_where_partial("message", models.Index(fields=FIELDS, name=NAME), PARTIAL),
    ]
