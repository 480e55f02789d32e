"""Django signals sent at djqueue's state changes.

``alarm_fired`` carries the :class:`~djqueue.models.Alarm` (``alarm``).
``messages_sent`` and ``messages_acked`` carry a list (``messages``) because both
happen in batches; so does ``messages_released`` (with ``delay``, the seconds until
they are visible again or None, and ``database``, the alias they live on), sent once a
release commits. The others carry one ``message``.
"""

from django.dispatch import Signal

messages_sent = Signal()
messages_acked = Signal()
messages_released = Signal()
message_retried = Signal()
message_dead_lettered = Signal()
messages_redriven = Signal()
worker_started = Signal()
worker_stopped = Signal()
alarm_fired = Signal()
