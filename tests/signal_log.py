"""Records django.tasks signals in the database, so tests see those sent by worker processes."""

from djqueue.tasks.compat import task_enqueued, task_finished, task_started


def log(signal_name: str):
    def receiver(sender, task_result, **kwargs) -> None:
        from tests.models import SignalLog

        SignalLog.objects.create(signal=signal_name, task_id=task_result.id,
                                 status=str(task_result.status))
    return receiver


def connect() -> None:
    for name, signal in (("enqueued", task_enqueued), ("started", task_started),
                         ("finished", task_finished)):
        signal.connect(log(name), weak=False, dispatch_uid=f"tests-{name}")
