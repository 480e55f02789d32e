"""Django signals sent at djqueue's state changes.

``alarm_fired`` carries the :class:`~djqueue.models.Alarm` (``alarm``).
``messages_sent`` and ``messages_acked`` carry a list (``messages``) because both
happen in batches; the others carry one ``message``.
"""

from django.dispatch import Signal

messages_sent = Signal()
messages_acked = Signal()
message_retried = Signal()
message_dead_lettered = Signal()
messages_redriven = Signal()
worker_started = Signal()
worker_stopped = Signal()
alarm_fired = Signal()
