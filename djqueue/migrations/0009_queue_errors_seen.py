from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("djqueue", "0008_history_queue_index_covered"),
    ]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="errors_seen",
            field=models.PositiveIntegerField(
                default=0, editable=False,
                help_text="Errors a worker or the reaper met serving this queue alone."),
        ),
        migrations.AddField(
            model_name="queue",
            name="last_error",
            field=models.TextField(blank=True, default="", editable=False),
        ),
    ]
