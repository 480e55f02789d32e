from djqueue.models.dedup import DedupKey
from djqueue.models.export import ExportRun
from djqueue.models.group import MessageGroup
from djqueue.models.history import History, Outcome
from djqueue.models.message import (
    GROUP_HOLDING_STATES,
    PENDING_STATES,
    Message,
    MessageQuerySet,
    State,
)
from djqueue.models.periodic import PeriodicTick
from djqueue.models.queue import Queue
from djqueue.models.task_record import FINISHED_STATUSES, TaskRecord, TaskStatus
from djqueue.models.topic import Body, ConsumerGroup, GroupMode, Subscription, Topic
from djqueue.models.trace import Event, TraceEvent
from djqueue.models.worker import Worker

__all__ = [
    "FINISHED_STATUSES", "GROUP_HOLDING_STATES", "PENDING_STATES", "Body", "ConsumerGroup",
    "DedupKey", "Event", "ExportRun", "GroupMode", "History", "Message", "MessageGroup", "MessageQuerySet",
    "Outcome", "PeriodicTick", "Queue", "State", "Subscription", "TaskRecord", "TaskStatus",
    "Topic", "TraceEvent", "Worker",
]
