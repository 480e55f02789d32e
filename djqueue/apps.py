from importlib.util import find_spec

from django.apps import AppConfig


class DjqueueConfig(AppConfig):
    name = "djqueue"
    verbose_name = "djqueue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imports in AppConfig.ready: these modules need the app registry, and each
        # registers something as it loads (the layering is in docs/architecture.md).
        from djqueue import (
            checks,  # noqa: F401  (AppConfig.ready: registers the system checks)
            signals,
        )
        from djqueue.api import ready_wakeups
        from djqueue.storage import (
            claim_limits,  # noqa: F401  (AppConfig.ready: a saved queue's limits are copied)
            queue_lookup,  # noqa: F401  (AppConfig.ready: cache signals)
            transitions,  # noqa: F401  (AppConfig.ready: Message.ack())
        )
        from djqueue.worker import registry  # AppConfig.ready: the tasks' handler source below

        # A release or a failure retried at once (in storage, below the wake-ups) wakes
        # receivers through its signal.
        signals.messages_released.connect(ready_wakeups.wake_for_released,
                                          dispatch_uid="djqueue.wake_for_released")
        signals.message_retried.connect(ready_wakeups.wake_for_retried,
                                        dispatch_uid="djqueue.wake_for_retried")

        if find_spec("django.tasks") or find_spec("django_tasks"):
            # The tasks feature registers its queues' handler with the worker, and its
            # known tasks with the periodic scheduler (for stored schedules): neither
            # imports it (without a tasks framework there is nothing to run).
            from djqueue.maintenance import periodic  # AppConfig.ready: stored schedules
            from djqueue.tasks import (
                known_tasks,
                workflows,  # noqa: F401  (AppConfig.ready: Node.enqueue())
            )
            from djqueue.tasks.task_handler import task_handlers  # AppConfig.ready, see above

            registry.add_source(task_handlers)
            periodic.look_up_stored_tasks_with(known_tasks.find)
