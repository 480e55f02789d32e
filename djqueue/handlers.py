"""Which function handles which queue: ``DJQUEUE["HANDLERS"]`` or the ``@handler`` decorator."""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import autodiscover_modules, import_string

from djqueue.conf import get_settings
from djqueue.exceptions import HandlerNotFound

if TYPE_CHECKING:
    from djqueue.models import Queue

HandlerFunc = Callable[[Any], Any]
AckHook = Callable[[str, Sequence[Any], Sequence[Any]], None]


@dataclass(frozen=True)
class Handler:
    func: HandlerFunc
    #: None: follow the queue's ``exactly_once`` option.
    exactly_once: bool | None = None
    #: Called by a worker inside each transaction that acks messages of the queue (its
    #: claim transaction), with (database alias, acks asked for, acked), once the leases
    #: are checked and before the acked rows are deleted: state the handler keeps beside
    #: the messages changes with them, and may be copied from their rows (see
    #: djqueue.task_runner).
    in_claim_transaction: AckHook | None = None

    @cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    @property
    def path(self) -> str:
        return f"{self.func.__module__}.{self.func.__qualname__}"


_registry: dict[str, Handler] = {}
_calling = threading.local()


@contextlib.contextmanager
def hook_runs_after() -> Iterator[None]:
    """Around a handler call whose ack will run the handler's ``in_claim_transaction``
    (a worker's), so the handler may leave its writes to that hook."""
    _calling.hooked = True
    try:
        yield
    finally:
        _calling.hooked = False


def hook_will_run() -> bool:
    """Inside a handler: whether :func:`hook_runs_after` wraps this call."""
    return getattr(_calling, "hooked", False)


def handler(
    queue: str, *, exactly_once: bool | None = None,
) -> Callable[[HandlerFunc], HandlerFunc]:
    """Register the decorated ``func(message)`` as the handler of ``queue``.

    Modules named ``handlers`` in installed apps are imported when a worker
    starts, so decorators there register themselves.
    """

    def register(func: HandlerFunc) -> HandlerFunc:
        _registry[queue] = Handler(func, exactly_once)
        return func

    return register


def discover() -> None:
    autodiscover_modules("handlers")


def configured_paths() -> dict[str, str]:
    return dict(get_settings().HANDLERS)


def resolve(queue: str) -> Handler:
    """The handler of ``queue``; settings win over decorators. HandlerNotFound if none.

    A broadcast consumer's queue ``topic:group:consumer`` falls back to the
    handler of its group, ``topic:group``.
    """
    try:
        return _resolve(queue)
    except HandlerNotFound:
        if queue.count(":") >= 2:
            try:
                return _resolve(queue.rsplit(":", 1)[0])
            except HandlerNotFound:
                pass
        raise


def _resolve(queue: str) -> Handler:
    path = configured_paths().get(queue)
    if path is not None:
        try:
            func = import_string(path)
        except ImportError as exc:
            raise HandlerNotFound(
                f"Handler {path!r} for queue {queue!r} does not import: {exc}") from None
        if not callable(func):
            raise HandlerNotFound(f"Handler {path!r} for queue {queue!r} is not callable.")
        return Handler(func)
    if queue in _registry:
        return _registry[queue]
    if queue in task_queues():
        from djqueue.task_runner import in_claim_transaction, run_task

        return Handler(run_task, in_claim_transaction=in_claim_transaction)
    raise HandlerNotFound(
        f"No handler for queue {queue!r}: add it to DJQUEUE['HANDLERS'] or decorate a "
        "function with @djqueue.handler().")


def task_queues() -> set[str]:
    """Queues of the django.tasks backends that run on djqueue (none without TASKS)."""
    from django.conf import settings

    if not getattr(settings, "TASKS", None):
        return set()
    from djqueue.backend import task_queue_names

    return task_queue_names()


def known_queues() -> list[str]:
    return sorted(set(configured_paths()) | set(_registry) | task_queues())


def serving(queue_names: Sequence[str]) -> tuple[dict[str, Handler], list[Queue]]:
    """The handler and the Queue of each name, as a worker starts: HandlerNotFound or
    QueueNotFound for a name it could not work; a task queue is created on first use."""
    from djqueue.queues import create_queue, get_queue

    discover()
    found = {name: resolve(name) for name in queue_names}
    tasks = task_queues()
    return found, [create_queue(name, exist_ok=True) if name in tasks
                   else get_queue(name, fresh=True) for name in queue_names]
