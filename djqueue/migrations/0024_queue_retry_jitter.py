"""``Queue.retry_jitter``: the fraction by which a retry's backoff step is lengthened at
random, so that messages that failed together do not retry together. A column on the
small queue table; existing queues get DJQUEUE["RETRY_JITTER"] (0.1 unless set)."""

import djqueue.models.queue
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('djqueue', '0023_queue_message_ttl'),
    ]

    operations = [
        migrations.AddField(
            model_name='queue',
            name='retry_jitter',
            field=models.FloatField(default=djqueue.models.queue.default_retry_jitter, help_text='Each backoff step is lengthened by up to this fraction, at random (0.1: up to 10 % longer), so that messages that failed together do not retry together; 0: the exact steps.'),
        ),
    ]
