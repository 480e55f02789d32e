"""PostgreSQL: autovacuum settings of djqueue's busiest tables (see
djqueue.maintenance.vacuuming). Elsewhere this migration does nothing."""

from django.db import migrations

#: A vacuum after 5,000 dead rows whatever the table's size (the server's default waits
#: for 20 % of it), an analyze after 5,000 changes, and no cost-based pauses: the tables
#: are small when kept so, and a pause only lets dead rows pile up.
OPTIONS = {
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "5000",
    "autovacuum_vacuum_insert_scale_factor": "0",
    "autovacuum_vacuum_insert_threshold": "5000",
    "autovacuum_analyze_scale_factor": "0",
    "autovacuum_analyze_threshold": "5000",
    "autovacuum_vacuum_cost_delay": "0",
}
TABLES = ["djqueue_message", "djqueue_messagegroup", "djqueue_queuelimiter",
          "djqueue_queuestat", "djqueue_taskrecord"]


def set_options(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    settings = ", ".join(f"{name} = {value}" for name, value in OPTIONS.items())
    for table in TABLES:
        schema_editor.execute(f"ALTER TABLE {schema_editor.quote_name(table)} SET ({settings})")


def reset_options(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(
            f"ALTER TABLE {schema_editor.quote_name(table)} RESET ({', '.join(OPTIONS)})")


class Migration(migrations.Migration):
    dependencies = [("djqueue", "0013_api_access")]
    operations = [migrations.RunPython(set_options, reset_options)]
