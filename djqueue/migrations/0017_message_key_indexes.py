"""Fewer index entries for every message sent and acked.

The message table had an index of ``queue_id`` alone, which the claim and group
indexes begin with, and indexes of ``stored_body_id`` and ``origin_queue_id``,
NULL on almost every row. Now the first is gone and the other two hold only the
rows that have a value (djqueue.models.indexes.NonNullIndex); on SQLite a send's
insert took 77–97 µs with them and 50–65 µs without (docs/performance.md).

Only indexes change: the foreign keys stay as they are. (Letting Django alter the
fields would drop and re-add each foreign key on PostgreSQL, checking every row
again, and copy the table three times on SQLite.) On MySQL/MariaDB the new
indexes replace the ones InnoDB made for the foreign keys, which it drops by
itself once another index serves the key.
"""

import django.db.models.deletion
from django.db import migrations, models

import djqueue.models.indexes

#: The indexes Django made for the three foreign keys (its names are a hash of the
#: table's and column's names). MySQL/MariaDB never had them: InnoDB's own served.
OLD_INDEXES = {
    "djqueue_message_queue_id_506f1e43": "queue_id",
    "djqueue_message_stored_body_id_02769897": "stored_body_id",
    "djqueue_message_origin_queue_id_9d292d24": "origin_queue_id",
}


def drop_old_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        return
    for name in OLD_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def create_old_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        return
    quote = schema_editor.quote_name
    for name, column in OLD_INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {quote(name)} "
            f"ON {quote('djqueue_message')} ({quote(column)})")


class Migration(migrations.Migration):

    dependencies = [
        ("djqueue", "0016_group_throttled_index"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="message",
            index=djqueue.models.indexes.NonNullIndex(fields=["stored_body"],
                                                      name="djqueue_msg_body"),
        ),
        migrations.AddIndex(
            model_name="message",
            index=djqueue.models.indexes.NonNullIndex(fields=["origin_queue"],
                                                      name="djqueue_msg_origin"),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(drop_old_indexes, create_old_indexes)],
            state_operations=[
                migrations.AlterField(
                    model_name="message",
                    name="origin_queue",
                    field=models.ForeignKey(
                        blank=True, db_index=False,
                        help_text="For a dead-lettered message: the queue it failed in.",
                        null=True, on_delete=django.db.models.deletion.PROTECT,
                        related_name="+", to="djqueue.queue"),
                ),
                migrations.AlterField(
                    model_name="message",
                    name="queue",
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.PROTECT,
                        related_name="messages", to="djqueue.queue"),
                ),
                migrations.AlterField(
                    model_name="message",
                    name="stored_body",
                    field=models.ForeignKey(
                        blank=True, db_index=False,
                        help_text="A topic delivery's body, stored once for all its deliveries.",
                        null=True, on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+", to="djqueue.body"),
                ),
            ],
        ),
    ]
