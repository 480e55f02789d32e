"""``Queue.message_ttl``: seconds a message may wait once visible before a claim sets
it aside, dead-lettered unrun (djqueue.storage.expiry). A nullable column on the small
queue table: no row is rewritten."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('djqueue', '0022_worker_wake_address_help_text'),
    ]

    operations = [
        migrations.AddField(
            model_name='queue',
            name='message_ttl',
            field=models.FloatField(blank=True, help_text="Seconds a message may wait once visible: one not delivered by then is dead-lettered unrun (a send's expires overrides it); empty: no limit.", null=True),
        ),
    ]
