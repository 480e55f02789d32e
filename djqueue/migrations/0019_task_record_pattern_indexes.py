"""PostgreSQL: drop the two ``varchar_pattern_ops`` indexes Django adds beside the
indexes of a text primary key and a unique text column of the task records.

They serve only ``LIKE 'prefix%'`` on ``id`` and ``unique_key``, which nothing runs
(the admin's search is ``icontains``, which they cannot serve either), and each
finished task wrote an entry into both: five index entries a task, now three.
Django does not track these indexes in its migration state, so only the database
changes; elsewhere this migration does nothing.
"""

from django.db import migrations

#: Django's names for them (a hash of the table's and column's names).
PATTERN_INDEXES = {
    "djqueue_taskrecord_id_58b459fe_like": "id",
    "djqueue_taskrecord_unique_key_b9acdef8_like": "unique_key",
}


def drop_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in PATTERN_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def create_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    for name, column in PATTERN_INDEXES.items():
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {quote(name)} ON "
                              f"{quote('djqueue_taskrecord')} ({quote(column)} varchar_pattern_ops)")


class Migration(migrations.Migration):
    dependencies = [("djqueue", "0018_foreign_key_indexes")]
    operations = [migrations.RunPython(drop_indexes, create_indexes)]
