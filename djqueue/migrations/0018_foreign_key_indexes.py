"""No index that another index of the same table begins with.

Django gives each foreign key an index of its own; where the table's unique
constraint (or another index) begins with the key's column, that index serves
every lookup by the key (a queue's or topic's deletion, the joins), and the
extra one only cost an entry for each row written: an ordered group or rate-limited
key, a dedup key, a topic's stored body, a queue's statistics row. PostgreSQL and
SQLite had them; MySQL/MariaDB never did (InnoDB's foreign keys use the unique
index). Only the indexes are dropped: the foreign keys are not dropped and checked
again, as letting Django alter the fields would do.
"""

import django.db.models.deletion
from django.db import migrations, models

#: The indexes dropped, by Django's names (a hash of the table's and column's names).
DROPPED = {
    "djqueue_messagegroup_queue_id_cfe680eb": ("djqueue_messagegroup", "queue_id"),
    "djqueue_dedupkey_queue_id_357c3972": ("djqueue_dedupkey", "queue_id"),
    "djqueue_body_topic_id_7a15b16d": ("djqueue_body", "topic_id"),
    "djqueue_queuestat_queue_id_ba8f4c8b": ("djqueue_queuestat", "queue_id"),
    "djqueue_topicstat_topic_id_b1027bec": ("djqueue_topicstat", "topic_id"),
    "djqueue_consumergroup_topic_id_2adbc109": ("djqueue_consumergroup", "topic_id"),
    "djqueue_subscription_group_id_9f1db45f": ("djqueue_subscription", "group_id"),
    "djqueue_apigrant_client_id_bd9da7e7": ("djqueue_apigrant", "client_id"),
}


def drop_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        return
    for name in DROPPED:
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def create_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        return
    quote = schema_editor.quote_name
    for name, (table, column) in DROPPED.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {quote(name)} ON {quote(table)} ({quote(column)})")


class Migration(migrations.Migration):

    dependencies = [
        ("djqueue", "0017_message_key_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(drop_indexes, create_indexes)],
            state_operations=[
                migrations.AlterField(
                    model_name="apigrant",
                    name="client",
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE,
                        related_name="grants", to="djqueue.apiclient"),
                ),
                migrations.AlterField(
                    model_name='body',
                    name='topic',
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE,
                        related_name='+', to='djqueue.topic'),
                ),
                migrations.AlterField(
                    model_name='consumergroup',
                    name='topic',
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE,
                        related_name='groups', to='djqueue.topic'),
                ),
                migrations.AlterField(
                    model_name='dedupkey',
                    name='queue',
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE,
                        related_name='+', to='djqueue.queue'),
                ),
                migrations.AlterField(
                    model_name='messagegroup',
                    name='queue',
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE,
                        related_name='+', to='djqueue.queue'),
                ),
                migrations.AlterField(
                    model_name='queuestat',
                    name='queue',
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE,
                        related_name='+', to='djqueue.queue'),
                ),
                migrations.AlterField(
                    model_name='subscription',
                    name='group',
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE,
                        related_name='subscriptions', to='djqueue.consumergroup'),
                ),
                migrations.AlterField(
                    model_name='topicstat',
                    name='topic',
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE,
                        related_name='+', to='djqueue.topic'),
                ),
            ],
        ),
    ]
