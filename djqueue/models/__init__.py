from djqueue.models.history import History, Outcome
from djqueue.models.message import PENDING_STATES, Message, MessageQuerySet, State
from djqueue.models.periodic import PeriodicTick
from djqueue.models.queue import Queue
from djqueue.models.task_record import FINISHED_STATUSES, TaskRecord, TaskStatus
from djqueue.models.worker import Worker

__all__ = [
    "FINISHED_STATUSES", "PENDING_STATES", "History", "Message", "MessageQuerySet", "Outcome",
    "PeriodicTick", "Queue", "State", "TaskRecord", "TaskStatus", "Worker",
]
