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

import djqueue.models.indexes

NAME = "djqueue_msg_group"
FIELDS = ["queue", "group_key", "state", "id"]
PLAIN = models.Index(fields=FIELDS, name=NAME)
PARTIAL = djqueue.models.indexes.NonNullIndex(fields=FIELDS, name=NAME, non_null="group_key")


def _replace(apps, schema_editor, old: models.Index, new: models.Index) -> None:
    if not schema_editor.connection.features.supports_partial_indexes:
        return  # MySQL/MariaDB: the two are the same plain index
    model = apps.get_model("djqueue", "Message")
    schema_editor.remove_index(model, old)
    schema_editor.add_index(model, new)


def to_partial(apps, schema_editor):
    _replace(apps, schema_editor, PLAIN, PARTIAL)


def to_plain(apps, schema_editor):
    _replace(apps, schema_editor, PARTIAL, PLAIN)


class Migration(migrations.Migration):

    dependencies = [
        ("djqueue", "0019_task_record_pattern_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(to_partial, to_plain)],
            state_operations=[
                migrations.RemoveIndex(model_name="message", name=NAME),
                migrations.AddIndex(model_name="message", index=PARTIAL),
            ],
        ),
    ]
