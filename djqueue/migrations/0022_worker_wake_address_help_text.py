"""The help text of ``Worker.wake_address`` says what listens there (it said
"doorbell"). No column changes: Django records help texts in its migration state,
and ``makemigrations --check`` wants the state to match the model."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("djqueue", "0021_message_due_index_partial")]
    operations = [
        migrations.AlterField(
            model_name="worker",
            name="wake_address",
            field=models.CharField(blank=True, default="", max_length=100,
                                   help_text="host:port where it hears wake-up datagrams, if any."),
        ),
    ]
