from djqueue.models.alarm import Alarm, AlarmPolicy, Metric
from djqueue.models.api_access import ApiClient, ApiGrant, ApiPermission, ApiToken
from djqueue.models.dedup import DedupKey
from djqueue.models.export import ExportRun
from djqueue.models.group import MessageGroup
from djqueue.models.handler_report import MessageLog, MessageProgress
from djqueue.models.history import History, Outcome
from djqueue.models.limiter import QueueLimiter
from djqueue.models.message import (
    GROUP_HOLDING_STATES,
    PENDING_STATES,
    Message,
    MessageQuerySet,
    State,
)
from djqueue.models.periodic import PeriodicSchedule, PeriodicTick
from djqueue.models.queue import Dashboard, Queue
from djqueue.models.stats import Period, QueueDepth, QueueStat, StatsCursor, TopicStat
from djqueue.models.task_record import FINISHED_STATUSES, TaskRecord, TaskStatus
from djqueue.models.topic import Body, ConsumerGroup, GroupMode, Subscription, Topic
from djqueue.models.trace import Event, TraceEvent
from djqueue.models.worker import ProcessKind, Worker
from djqueue.models.workflow import (
    SETTLED_STATES,
    FailurePolicy,
    RunIf,
    StepDependency,
    StepState,
    Workflow,
    WorkflowState,
    WorkflowStep,
)

__all__ = [
    "FINISHED_STATUSES",
    "GROUP_HOLDING_STATES",
    "PENDING_STATES",
    "SETTLED_STATES",
    "Alarm",
    "AlarmPolicy",
    "ApiClient",
    "ApiGrant",
    "ApiPermission",
    "ApiToken",
    "Body",
    "ConsumerGroup",
    "Dashboard",
    "DedupKey",
    "Event",
    "ExportRun",
    "FailurePolicy",
    "GroupMode",
    "History",
    "Message",
    "MessageGroup",
    "MessageLog",
    "MessageProgress",
    "MessageQuerySet",
    "Metric",
    "Outcome",
    "Period",
    "PeriodicSchedule",
    "PeriodicTick",
    "ProcessKind",
    "Queue",
    "QueueDepth",
    "QueueLimiter",
    "QueueStat",
    "RunIf",
    "State",
    "StatsCursor",
    "StepDependency",
    "StepState",
    "Subscription",
    "TaskRecord",
    "TaskStatus",
    "Topic",
    "TopicStat",
    "TraceEvent",
    "Worker",
    "Workflow",
    "WorkflowState",
    "WorkflowStep",
]
